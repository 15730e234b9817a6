"""Broker status: what was applied (memory plan, endpoint) and what runs.

Contract: docs/contracts/operator.md#broker-status.

``Report`` starts from the object's current status, collects changes, and writes only the
top-level keys that differ, so a steady Broker costs no status writes; conditions keep their
``lastTransitionTime`` unless they flip. Warnings become a Warning Event when their reason
changes, not on every pass.
"""

from __future__ import annotations

from typing import Any

import kopf

from hutch_operator import brokerclient, conditions, config, errors, kube, memory, references
from hutch_operator import translators as tr
from hutch_operator.children import meta

ALIVENESS = "/api/aliveness-test/%2F"
TLS_ERRORS = (
    errors.TLSVerificationFailedError,
    errors.TLSHandshakeFailedError,
    errors.TLSSecretInvalidError,
)


def _endpoint(broker: meta.BrokerObject) -> dict[str, str]:
    """Where clients connect: the TLS listeners when ``spec.tls`` is set."""
    if broker.tls is not None:
        return {
            "amqp": f"amqps://{broker.host}:{meta.AMQPS_PORT}",
            "management": f"https://{broker.host}:{meta.MANAGEMENT_TLS_PORT}",
        }
    return {
        "amqp": f"amqp://{broker.host}:{meta.AMQP_PORT}",
        "management": f"http://{broker.host}:{meta.MANAGEMENT_PORT}",
    }


class Report:
    def __init__(self, body: kopf.Body) -> None:
        self.body = body
        self.original = dict(body.status)
        self.status: dict[str, Any] = {k: v for k, v in self.original.items() if k != "conditions"}
        self.conditions = [dict(c) for c in self.original.get("conditions") or ()]
        self.generation = body.metadata.get("generation")

    def condition(self, type_: str, ok: bool, reason: str, message: str = "") -> bool:
        """Sets a condition; True when its status or reason changed."""
        before = conditions.find(self.conditions, type_)
        self.conditions = conditions.upsert(
            self.conditions,
            type_=type_,
            status=ok,
            reason=reason,
            message=message,
            generation=self.generation,
        )
        wanted = ("True" if ok else "False", reason)
        return before is None or (before.get("status"), before.get("reason")) != wanted

    def reconcile_failed(self, error: errors.HutchError) -> None:
        if self.condition("ReconcileSuccess", False, error.reason, str(error)):
            kopf.warn(self.body, reason=error.reason, message=str(error))

    def reconciled(self, broker: meta.BrokerObject) -> None:
        spec = broker.spec
        plan = memory.watermark(spec.resources.model_dump(), spec.memory_high_watermark)
        self.plan = plan
        self.condition("ReconcileSuccess", True, "Applied", "children applied")
        self.status.update(
            observedGeneration=self.generation,
            endpoint=_endpoint(broker),
            defaultUserSecret=broker.secret_name,
            memory=plan.status(),
            diskFreeLimitBytes=memory.disk_free_limit(spec.persistence.size),
        )

    async def observe(self, broker: meta.BrokerObject) -> None:
        spec = broker.spec
        plan = memory.watermark(spec.resources.model_dump(), spec.memory_high_watermark)
        await self._pod_ready(broker)
        node = await self._management(broker)
        warnings = list(plan.warnings)
        if node.get("mem_alarm"):
            warnings.insert(0, ("MemoryAlarm", "the broker's memory alarm is in effect"))
        if node.get("disk_free_alarm"):
            warnings.insert(0, ("DiskAlarm", "the broker's disk alarm is in effect"))
        if plan.basis == "Runtime" and node.get("mem_limit"):
            self.status["memory"] = {**plan.status(), "highWatermarkBytes": node["mem_limit"]}
        if warnings:
            message = "; ".join(text for _, text in warnings)
            if self.condition("NoWarnings", False, warnings[0][0], message):
                kopf.warn(self.body, reason=warnings[0][0], message=message)
        else:
            self.condition("NoWarnings", True, "NoWarnings")

    async def _pod_ready(self, broker: meta.BrokerObject) -> None:
        path = kube.object_path(
            "apps/v1", "statefulsets", broker.namespace, broker.statefulset_name
        )
        try:
            statefulset = await kube.api().get(path)
        except errors.KubeError:
            statefulset = None
        ready = (statefulset or {}).get("status", {}).get("readyReplicas") or 0
        if ready >= broker.spec.replicas:
            self.condition("Ready", True, "PodReady", f"{ready} pod ready")
        else:
            self.condition("Ready", False, "PodNotReady", f"{ready}/{broker.spec.replicas} ready")

    async def _management(self, broker: meta.BrokerObject) -> dict[str, Any]:
        """Aliveness → Available; overview → version; nodes → alarms and runtime limit."""
        data = await references.read_secret(broker.namespace, broker.secret_name)
        tls = broker.tls
        base = config.broker_address(broker.namespace, broker.name, tls=tls is not None).management
        if not data:
            self.condition("Available", False, "ManagementUnreachable", "no default user yet")
            return {}
        try:
            trust = references.TLSMaterial()
            if tls is not None:
                trust = await references.tls_material(  # fresh: a fixed CA shows at once
                    broker.namespace, tls.secret_name, tls.ca_secret_name or "", fresh=True
                )
            client = brokerclient.POOL.get(
                base,
                data["username"],
                data["password"],
                ca_pem=trust.ca_pem,
                ca_source=trust.ca_source,
            )
            await client.call(tr.Request("GET", ALIVENESS))
            overview = await client.call(tr.Request("GET", "/api/overview"))
            nodes = await client.call(tr.Request("GET", "/api/nodes"))
        except errors.HutchError as exc:
            if isinstance(exc, errors.AuthenticationFailedError):
                references.forget_secrets()
                await brokerclient.POOL.drop(client)
            # A TLS failure keeps its own reason: "TLSVerificationFailed" says what to fix.
            reason = exc.reason if isinstance(exc, TLS_ERRORS) else "ManagementUnreachable"
            if self.condition("Available", False, reason, str(exc)) and reason != (
                "ManagementUnreachable"
            ):
                kopf.warn(self.body, reason=reason, message=str(exc))
            return {}
        self.condition("Available", True, "AlivenessOk", f"{base} answers")
        version = overview.get("product_version") or overview.get("rabbitmq_version")
        if version:
            self.status["brokerVersion"] = str(version)
        return nodes[0] if isinstance(nodes, list) and nodes else {}

    def flush(self, patch: kopf.Patch) -> None:
        desired = {**self.status, "conditions": self.conditions}
        for key, value in conditions.status_patch(self.original, desired).items():
            patch.status[key] = value
