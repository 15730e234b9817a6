"""Services: the headless ``<broker>-nodes`` (stable pod DNS) and the client ``<broker>``."""

from __future__ import annotations

from typing import Any

from hutch_operator.instances import overrides
from hutch_operator.instances.children import meta

PLAIN = (("amqp", meta.AMQP_PORT), ("management", meta.MANAGEMENT_PORT))
TLS = (("amqps", meta.AMQPS_PORT), ("management-tls", meta.MANAGEMENT_TLS_PORT))
TLS_NAMES = ("amqps", "management-tls")


def listening(broker: meta.BrokerObject) -> list[tuple[str, int]]:
    """(port name, number) of every listener the broker's config opens."""
    names = list(PLAIN) if broker.plain_listeners else []
    return names + (list(TLS) if broker.tls is not None else [])


def ports(broker: meta.BrokerObject) -> list[dict[str, Any]]:
    return [
        {"name": name, "port": number, "targetPort": name, "protocol": "TCP"}
        for name, number in listening(broker)
    ]


def build_headless(broker: meta.BrokerObject) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.metadata(broker, broker.headless_name),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": meta.selector(broker),
            "ports": ports(broker),
        },
    }


def build_client(broker: meta.BrokerObject) -> dict[str, Any]:
    spec = broker.spec.service
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.metadata(broker, broker.name),
        "spec": {"type": spec.type, "selector": meta.selector(broker), "ports": ports(broker)},
    }
    service["metadata"]["labels"] = {**spec.labels, **service["metadata"]["labels"]}
    if spec.annotations:
        service["metadata"]["annotations"] = dict(spec.annotations)
    patch = broker.spec.override.service
    overrides.check_forbidden(patch)
    merged: dict[str, Any] = overrides.merge(service, patch)
    return merged
