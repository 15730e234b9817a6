"""PodDisruptionBudget ``<broker>``: a healthy broker blocks drains, a crash-looping one never."""

from __future__ import annotations

from typing import Any

from hutch_operator.instances.children import meta


def build(broker: meta.BrokerObject) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta.metadata(broker, broker.name),
        "spec": {
            "minAvailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": meta.selector(broker)},
        },
    }
