"""Services: the headless ``<broker>-nodes`` (stable pod DNS) and the client ``<broker>``."""

from __future__ import annotations

from typing import Any

from hutch_operator import overrides
from hutch_operator.children import meta

PORTS = [
    {"name": "amqp", "port": meta.AMQP_PORT, "targetPort": "amqp", "protocol": "TCP"},
    {
        "name": "management",
        "port": meta.MANAGEMENT_PORT,
        "targetPort": "management",
        "protocol": "TCP",
    },
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
            "ports": PORTS,
        },
    }


def build_client(broker: meta.BrokerObject) -> dict[str, Any]:
    spec = broker.spec.service
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.metadata(broker, broker.name),
        "spec": {"type": spec.type, "selector": meta.selector(broker), "ports": PORTS},
    }
    service["metadata"]["labels"] = {**spec.labels, **service["metadata"]["labels"]}
    if spec.annotations:
        service["metadata"]["annotations"] = dict(spec.annotations)
    patch = broker.spec.override.service
    overrides.check_forbidden(patch)
    merged: dict[str, Any] = overrides.merge(service, patch)
    return merged
