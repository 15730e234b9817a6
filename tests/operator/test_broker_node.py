"""examples/broker.yaml on the real node: the operator's StatefulSet runs the broker image.

Why: on kwok the Broker's Pod runs nowhere, so the watermark the operator computes from the
memory request never met a real broker in a real cgroup. Here it does: the container's
memory.limit_in_bytes is the spec's limit, the broker's own ``/api/nodes`` reports the watermark
computed from the request, and Broker.status says the same.

The operator runs in the test process (KopfRunner), so it reaches the broker by the Pod IP over
the node's bridge through ``HUTCH_BROKER_ADDRESSES`` (no cluster DNS or kube-proxy yet).
"""

from __future__ import annotations

import base64
import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hutch_operator import memory

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/hutch/hutch-broker:0.1.0"


@pytest.fixture(scope="module")
def running(node: Any, kit: Any) -> Iterator[Any]:
    """The operator in-process against the node plane, with our locally built image."""
    os.environ["HUTCH_DEFAULT_BROKER_IMAGE"] = IMAGE
    try:
        with kit.run_operator(node):
            yield node
    finally:
        os.environ.pop("HUTCH_DEFAULT_BROKER_IMAGE", None)
        os.environ.pop("HUTCH_BROKER_ADDRESSES", None)


def example_broker() -> dict[str, Any]:
    """examples/broker.yaml, with the node tier's local-PV StorageClass (no default class)."""
    broker: dict[str, Any] = yaml.safe_load((REPO / "examples" / "broker.yaml").read_text())
    broker["spec"]["persistence"]["storageClassName"] = "hutch-test"
    return broker


def management_get(url: str, user: str, password: str) -> Any:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=5) as reply:  # noqa: S310 - the Pod on our bridge
        return json.loads(reply.read())


def test_example_broker_runs_with_its_cgroup_limit_and_watermark(
    running: Any, make_local_pvs: Any, kit: Any
) -> None:
    plane = running
    make_local_pvs(1, size="2Gi")
    kube = kit.Kube(plane, plane.create_namespace())
    ns = kube.namespace
    broker = example_broker()
    name = broker["metadata"]["name"]
    kube.create("Broker", "brokers", name, broker["spec"])

    pod_path = f"/api/v1/namespaces/{ns}/pods/{name}-server-0"

    def pod_ready() -> dict[str, Any] | None:
        status, pod = plane.api("GET", pod_path)
        conditions = pod.get("status", {}).get("conditions", []) if status == 200 else []
        ok = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return pod if ok else None

    pod = kit.wait_for(pod_ready, 180, "the broker Pod Ready on the real node")
    assert pod["spec"]["nodeName"] == "hutch-node"
    ip = pod["status"]["podIP"]
    os.environ["HUTCH_BROKER_ADDRESSES"] = f"{ns}/{name}=http://{ip}:15672|amqp://{ip}:5672"

    resources = broker["spec"]["resources"]
    limit = memory.quantity_bytes(resources["limits"]["memory"])
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    cgroups = Path("/sys/fs/cgroup/memory", plane.node_layout.cgroup_name)
    (cgroup,) = cgroups.glob(f"kubepods/**/pod{pod['metadata']['uid']}/{container_id}")
    assert int((cgroup / "memory.limit_in_bytes").read_text()) == limit

    expected = memory.watermark(resources, broker["spec"]["memoryHighWatermark"])
    assert expected.basis == "Request"
    _, secret = plane.api("GET", f"/api/v1/namespaces/{ns}/secrets/{name}-default-user")
    user, password = (
        base64.b64decode(secret["data"][k]).decode() for k in ("username", "password")
    )
    (node_info,) = management_get(f"http://{ip}:15672/api/nodes", user, password)
    assert node_info["mem_limit"] == expected.high_watermark_bytes

    def available() -> dict[str, Any] | None:
        obj = kube.get("brokers", name)
        return obj if kit.ready(obj, "Available")[0] == "True" else None

    status = kit.wait_for(available, 90, "Broker Available")["status"]
    assert status["memory"]["highWatermarkBytes"] == expected.high_watermark_bytes
    assert kit.ready(kube.get("brokers", name), "Ready")[0] == "True"
