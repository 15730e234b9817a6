"""How the chain's clients reach a Broker: plain AMQP, or AMQPS verified against its CA.

Why decided from the Broker object: the quickstart's publisher, its management checks and the
Spark job must connect the way the Broker serves, and ``spec.tls`` is the one place that says
so (the operator reads the same field: ``secretName`` set means AMQPS on 5671 and HTTPS on
15671, docs/operator.md "TLS"). A flag of the quickstart's own could disagree with the Broker it
applied; this reads what was applied. Pure: the caller GETs the Broker and the CA Secret.

The CA clients trust is ``caSecretName``'s ``ca.crt``, else ``secretName``'s (as the operator
verifies). The Spark Pods get only that key, projected from the Secret at ``CA_MOUNT`` like the
chart's ``broker.tls`` (charts/hutch-spark), never the certificate's ``tls.key``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

AMQPS_PORT = 5671
HTTPS_PORT = 15671
AMQP_PORT = 5672
HTTP_PORT = 15672
CA_KEY = "ca.crt"
CA_MOUNT = "/etc/hutch-ca"  # the chart's broker.tls.mountPath default
CA_VOLUME = "hutch-ca"


@dataclass(frozen=True)
class BrokerTLS:
    """What a client of one TLS Broker needs: where the CA is and which name to verify."""

    ca_secret: str  # a Secret in the Broker's namespace whose CA_KEY issued the certificate
    server_name: str  # <broker>.<namespace>.svc: the Service name the certificate must carry
    plain_listeners: bool  # False with disableNonTLSListeners: 5672 and 15672 are closed

    @property
    def ca_file(self) -> str:
        """Where the Spark Pods read the CA (``HUTCH_AMQP_CA_FILE``)."""
        return f"{CA_MOUNT}/{CA_KEY}"

    def amqp_uri(self, vhost: str = "%2F") -> str:
        """The in-cluster address as the chart renders it with ``broker.tls.enabled``."""
        return f"amqps://{self.server_name}:{AMQPS_PORT}/{vhost}"

    def describe(self) -> str:
        plain = "plain listeners on" if self.plain_listeners else "plain listeners off"
        return (
            f"TLS: AMQPS {AMQPS_PORT} and HTTPS {HTTPS_PORT}, certificate verified for "
            f"{self.server_name} against Secret {self.ca_secret} key {CA_KEY} ({plain})"
        )


def broker_tls(broker: Mapping[str, Any]) -> BrokerTLS | None:
    """The clients' TLS settings for a Broker object, or None when it serves plain AMQP."""
    tls = (broker.get("spec") or {}).get("tls") or {}
    secret = str(tls.get("secretName") or "")
    if not secret:
        return None
    meta = broker.get("metadata") or {}
    return BrokerTLS(
        ca_secret=str(tls.get("caSecretName") or secret),
        server_name=f"{meta['name']}.{meta['namespace']}.svc",
        plain_listeners=not tls.get("disableNonTLSListeners", False),
    )


def service_ports(*, tls: bool) -> tuple[int, int]:
    """The Service's (AMQP, management) ports the host's port-forward reaches."""
    return (AMQPS_PORT, HTTPS_PORT) if tls else (AMQP_PORT, HTTP_PORT)


def ca_volume(ca_secret: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount) for a Spark Pod: only ``ca.crt`` of ``ca_secret``, read-only."""
    volume = {
        "name": CA_VOLUME,
        "secret": {"secretName": ca_secret, "items": [{"key": CA_KEY, "path": CA_KEY}]},
    }
    mount = {"name": CA_VOLUME, "mountPath": CA_MOUNT, "readOnly": True}
    return volume, mount


def server_hosts(name: str, namespace: str) -> tuple[str, ...]:
    """What the quickstart's server certificate names: the Service (short and cluster-local
    forms, as the Pods and the operator dial it) and loopback, where the port-forward is."""
    service = f"{name}.{namespace}.svc"
    return (service, f"{service}.cluster.local", "127.0.0.1")
