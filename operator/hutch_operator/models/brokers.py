"""Broker: one hutch-broker instance (StatefulSet of one, PVC, Services, config, Secret, PDB).

Only ``persistence.storageClassName`` is immutable by CEL; a volume can grow but not shrink,
which needs the live PVC and so is enforced by the operator (``UnsupportedOperation``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from hutch_operator.models import common

DEFAULT_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "250m", "memory": "512Mi"},
    "limits": {"memory": "512Mi"},
}


class Resources(common.CrdModel):
    """The broker container's core ResourceRequirements (requests and limits only)."""

    requests: dict[str, common.IntOrString] = Field(default_factory=dict)
    limits: dict[str, common.IntOrString] = Field(default_factory=dict)


class Persistence(common.CrdModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [common.immutable_optional("storageClassName")]
        }
    )

    size: common.IntOrString = Field(
        "1Gi", description='Volume size; "0" means emptyDir (no PVC). Grow only.'
    )
    storage_class_name: str | None = Field(None, description="Storage class; cluster default.")


class ServiceSpec(common.CrdModel):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)


class PodDisruptionBudgetSpec(common.CrdModel):
    enabled: bool = True


class LocalObjectReference(common.CrdModel):
    name: str = Field(min_length=1)


class Override(common.CrdModel):
    """Patches merged over the generated objects (maps merge, null deletes, named lists merge)."""

    stateful_set: common.FreeForm = Field(default_factory=dict)
    service: common.FreeForm = Field(default_factory=dict)


class TLSSpec(common.CrdModel):
    """AMQPS (5671) and HTTPS management (15671) from Secrets in the Broker's namespace.

    ``secretName`` has cert-manager's ``kubernetes.io/tls`` shape (``tls.crt``, ``tls.key``,
    optional ``ca.crt``). The operator verifies the management certificate against
    ``caSecretName``'s ``ca.crt``, else ``secretName``'s ``ca.crt``, else the system trust store.
    """

    secret_name: str = Field(
        min_length=1, description="kubernetes.io/tls Secret: tls.crt, tls.key, optional ca.crt."
    )
    ca_secret_name: str | None = Field(
        None,
        min_length=1,
        description="Secret whose ca.crt the operator trusts and the broker uses to verify "
        "client certificates (ssl_options.cacertfile); may equal secretName.",
    )
    disable_non_tls_listeners: bool = Field(
        False,
        alias="disableNonTLSListeners",  # the RabbitMQ cluster operator's spelling
        description="Serve only AMQPS 5671 and HTTPS 15671 (no 5672, no 15672).",
    )


class BrokerSpec(common.CrdModel):
    replicas: int = Field(1, ge=1, le=1, description="Fixed at 1 in v1alpha1.")
    image: str | None = Field(
        None, description="Broker image; defaults to the operator's HUTCH_DEFAULT_BROKER_IMAGE."
    )
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list)
    resources: Resources = Field(
        default_factory=lambda: Resources.model_validate(DEFAULT_RESOURCES),
        description="The broker container's resources; the memory request sets the watermark.",
        json_schema_extra={"default": DEFAULT_RESOURCES},
    )
    persistence: Persistence = common.nested(Persistence, "The data volume.")
    memory_high_watermark: float = Field(
        0.4,
        gt=0,
        le=1,
        description="Fraction of the memory request (else limit) at which publishers block.",
    )
    additional_config: str = Field(
        "", max_length=100_000, description="Extra hutch-broker.conf lines."
    )
    service: ServiceSpec = common.nested(ServiceSpec, "The client Service.")
    topology_allowed_namespaces: list[str] = Field(
        default_factory=list,
        description='Namespaces whose topology objects may use this Broker ("*" = any).',
    )
    pod_disruption_budget: PodDisruptionBudgetSpec = common.nested(
        PodDisruptionBudgetSpec, "minAvailable 1 with unhealthyPodEvictionPolicy AlwaysAllow."
    )
    termination_grace_period_seconds: int = Field(60, ge=0)
    override: Override = common.nested(Override, "Patches for the generated objects.")
    tls: TLSSpec | None = Field(None, description="TLS listeners; a Secret change rolls the pod.")


class MemoryPlan(common.CrdModel):
    basis: Literal["Request", "Limit", "Runtime"]
    basis_bytes: int | None = None
    relative: str
    high_watermark_bytes: int | None = None


class MemoryStatus(MemoryPlan):
    """The plan for the broker container's resources as the running Pod has them."""

    pending: MemoryPlan | None = Field(
        None,
        description="The spec's plan while the running Pod still has other resources (an "
        "older revision); absent once a Pod runs it.",
    )


class PodReplaced(common.CrdModel):
    """The last Pod the operator deleted because it was outdated and not Ready."""

    pod: str
    from_revision: str
    revision: str = Field(description="The StatefulSet revision it was replaced for (once).")
    at: str


class Endpoint(common.CrdModel):
    amqp: str
    management: str


class AbandonedObject(common.CrdModel):
    """A broker object a deleted topology CR had declared but could not delete in time."""

    kind: str = Field(description="Kind of the deleted CR (Queue, Exchange, ...).")
    namespace: str = Field(description="Namespace of the deleted CR.")
    name: str = Field(description="Name of the deleted CR.")
    vhost: str
    object: str = Field(description="The broker object's name.")
    spec: dict[str, Any] = Field(
        default_factory=dict, description="The deleted CR's spec: what is deleted once it answers."
    )
    abandoned_at: str | None = None


class BrokerStatus(common.CrdModel):
    model_config = ConfigDict(extra="allow")

    observed_generation: int | None = None
    conditions: list[common.Condition] = Field(default_factory=list)
    endpoint: Endpoint | None = None
    default_user_secret: str | None = None
    memory: MemoryStatus | None = None
    disk_free_limit_bytes: int | None = None
    broker_version: str | None = None
    pod_replaced: PodReplaced | None = None
    abandoned: list[AbandonedObject] = Field(
        default_factory=list,
        description="Broker objects left behind by topology CRs deleted while this broker was "
        "unreachable (DeleteAbandoned); deleted, and dropped from this list, once it answers.",
    )
