"""examples/broker.yaml on the real node: the operator's StatefulSet runs the broker image.

Why: on kwok the Broker's Pod runs nowhere, so the watermark the operator computes from the
memory request never met a real broker in a real cgroup. Here it does: the container's
memory.limit_in_bytes is the spec's limit, the broker's own ``/api/nodes`` reports the watermark
computed from the request, and Broker.status says the same; raising the request rolls the Pod
into a new container whose cgroup and watermark follow.

The operator runs in the test process (KopfRunner, fixture ``node_operator``), so it reaches the
broker through ``HUTCH_BROKER_ADDRESSES`` rather than cluster DNS (the host does not resolve
``.svc`` names): the Service's ClusterIP, which kube-proxy routes from the host and which
follows the Pod across the roll once the new Pod's endpoint is ready (``wait_routed``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hutch_demo import waiting
from hutch_operator.instances import memory
from hutch_testing import brokerpods

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]


def example_broker() -> dict[str, Any]:
    """examples/broker.yaml, with the node tier's local-PV StorageClass (no default class)."""
    broker: dict[str, Any] = yaml.safe_load((REPO / "examples" / "broker.yaml").read_text())
    broker["spec"]["persistence"]["storageClassName"] = "hutch-test"
    return broker


@pytest.fixture(scope="module")
def example(node_operator: Any, kit: Any) -> tuple[brokerpods.BrokerPod, Any, dict[str, Any]]:
    """The example Broker, created once for the module, with its Pod Ready."""
    node_operator.make_local_pvs(1, size="2Gi")
    kube = kit.Kube(node_operator, node_operator.create_namespace())
    broker = example_broker()
    kube.create("Broker", "brokers", broker["metadata"]["name"], broker["spec"])
    pod = brokerpods.BrokerPod(node_operator, kube.namespace, broker["metadata"]["name"]).attach()
    return pod, kube, broker["spec"]


def container_limit(broker: brokerpods.BrokerPod) -> int:
    return int((broker.cgroup() / "memory.limit_in_bytes").read_text())


def reported_watermark(broker: brokerpods.BrokerPod) -> int | None:
    """``mem_limit`` from the broker's ``/api/nodes``; None while the Service has no endpoint."""
    try:
        return int(broker.node_info()["mem_limit"])
    except OSError:
        return None


def status_watermark(kube: Any, name: str) -> int | None:
    status = (kube.get("brokers", name) or {}).get("status", {})
    value = status.get("memory", {}).get("highWatermarkBytes")
    return int(value) if value is not None else None


def test_example_broker_runs_with_its_cgroup_limit_and_watermark(example: Any, kit: Any) -> None:
    broker, kube, spec = example
    assert broker.pod["spec"]["nodeName"] == "hutch-node"
    resources = spec["resources"]
    assert container_limit(broker) == memory.quantity_bytes(resources["limits"]["memory"])

    expected = memory.watermark(resources, spec["memoryHighWatermark"])
    assert expected.basis == "Request"
    assert broker.node_info()["mem_limit"] == expected.high_watermark_bytes

    def available() -> dict[str, Any] | None:
        obj = kube.get("brokers", broker.name)
        return obj if kit.ready(obj, "Available")[0] == "True" else None

    status = kit.wait_for(available, 90, "Broker Available")["status"]
    assert status["memory"]["highWatermarkBytes"] == expected.high_watermark_bytes
    assert kit.ready(kube.get("brokers", broker.name), "Ready")[0] == "True"


def test_raising_the_memory_request_rolls_the_pod_and_moves_the_watermark(example: Any) -> None:
    broker, kube, spec = example
    first = broker.wait_ready()
    old = memory.watermark(spec["resources"], spec["memoryHighWatermark"])
    assert reported_watermark(broker) == old.high_watermark_bytes
    raised = {"requests": {"memory": "1536Mi"}, "limits": {"memory": "1536Mi"}}
    resources = {
        "requests": {**spec["resources"]["requests"], **raised["requests"]},
        "limits": {**spec["resources"]["limits"], **raised["limits"]},
    }
    new = memory.watermark(resources, spec["memoryHighWatermark"])
    assert new.high_watermark_bytes != old.high_watermark_bytes

    patched = kube.patch_spec("brokers", broker.name, {"resources": raised})
    assert patched.returncode == 0, patched.stderr
    second = broker.wait_ready(not_uid=first["metadata"]["uid"])
    broker.wait_routed()  # the ClusterIP follows the new Pod once its endpoint is ready

    old_id = first["status"]["containerStatuses"][0]["containerID"]
    assert second["status"]["containerStatuses"][0]["containerID"] != old_id
    assert second["spec"]["containers"][0]["resources"]["requests"]["memory"] == "1536Mi"
    assert container_limit(broker) == 1536 * 1024 * 1024
    waiting.wait_for(
        lambda: reported_watermark(broker), lambda value: value == new.high_watermark_bytes,
        timeout=30, interval=0.2, what="/api/nodes mem_limit from the new request",
    )  # fmt: skip
    waiting.wait_for(
        lambda: status_watermark(kube, broker.name),
        lambda value: value == new.high_watermark_bytes,
        timeout=30, interval=0.2, what="Broker.status.memory.highWatermarkBytes",
    )  # fmt: skip
