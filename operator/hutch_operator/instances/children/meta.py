"""Names, labels and owner references every child shares (docs/contracts/operator.md#children).

Selectors use only ``name`` and ``instance``: selectors are immutable, and the other labels
(``version`` above all) change with the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hutch_operator.models import brokers, common

AMQP_PORT = 5672
MANAGEMENT_PORT = 15672
AMQPS_PORT = 5671
MANAGEMENT_TLS_PORT = 15671
DEFAULT_USERNAME = "hutch"


@dataclass(frozen=True)
class BrokerObject:
    """What every builder needs to know about the Broker CR."""

    name: str
    namespace: str
    uid: str
    spec: brokers.BrokerSpec
    image: str

    @property
    def secret_name(self) -> str:
        return f"{self.name}-default-user"

    @property
    def config_name(self) -> str:
        return f"{self.name}-config"

    @property
    def headless_name(self) -> str:
        return f"{self.name}-nodes"

    @property
    def statefulset_name(self) -> str:
        return f"{self.name}-server"

    @property
    def host(self) -> str:
        return f"{self.name}.{self.namespace}.svc"

    @property
    def tls(self) -> brokers.TLSSpec | None:
        return self.spec.tls

    @property
    def plain_listeners(self) -> bool:
        """Whether 5672 and 15672 listen (always, unless TLS is on and they are disabled)."""
        return self.spec.tls is None or not self.spec.tls.disable_non_tls_listeners

    @property
    def version(self) -> str:
        tag = self.image.rsplit("/", 1)[-1]
        return tag.split(":", 1)[1] if ":" in tag else "latest"


def selector(broker: BrokerObject) -> dict[str, str]:
    return {"app.kubernetes.io/name": "hutch-broker", "app.kubernetes.io/instance": broker.name}


def labels(broker: BrokerObject) -> dict[str, str]:
    return {
        **selector(broker),
        "app.kubernetes.io/component": "broker",
        "app.kubernetes.io/part-of": "hutch",
        "app.kubernetes.io/managed-by": "hutch-operator",
        "app.kubernetes.io/version": broker.version[:63],
    }


def metadata(broker: BrokerObject, name: str, **extra: Any) -> dict[str, Any]:
    """Name, namespace, labels and the controller owner reference that garbage-collects it."""
    return {
        "name": name,
        "namespace": broker.namespace,
        "labels": labels(broker),
        "ownerReferences": [
            {
                "apiVersion": common.API_VERSION,
                "kind": "Broker",
                "name": broker.name,
                "uid": broker.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        **extra,
    }
