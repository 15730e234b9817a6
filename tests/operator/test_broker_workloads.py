"""A Broker in the workloads tier: real StatefulSet validation, a Pod made Ready by kwok on a
fake Node, a bound PVC, and garbage collection of every child when the Broker is deleted.

The pod runs nowhere (kwok), so Available stays False here: the management API is exercised in
test_hutch_topology.py against a real local broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hutch_demo import management

pytestmark = pytest.mark.timeout(150)


@pytest.fixture(scope="module")
def running(workloads: Any, kit: Any) -> Iterator[Any]:
    with kit.run_operator(workloads):
        yield workloads


def test_broker_pod_ready_and_children_collected(running: Any, make_pvs: Any, kit: Any) -> None:
    plane = running
    make_pvs(1, size="1Gi")
    kube = kit.Kube(plane, plane.create_namespace())
    ns = kube.namespace
    spec = {"persistence": {"size": "1Gi", "storageClassName": "hutch-test"}}
    kube.create("Broker", "brokers", "wb", spec)
    broker = kit.wait_for(
        lambda: (b := kube.get("brokers", "wb")) and kit.ready(b, "Ready")[0] == "True" and b,
        90,
        "Broker Ready (pod scheduled and Ready on a kwok node)",
    )
    assert kit.ready(broker, "ReconcileSuccess") == ("True", "Applied")
    _, pvc = plane.api("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data-wb-server-0")
    assert pvc["status"]["phase"] == "Bound"
    _, secret = plane.api("GET", f"/api/v1/namespaces/{ns}/secrets/wb-default-user")
    assert set(secret["data"]) >= {"username", "password", "uri", "amqp-uri"}

    kube.delete("brokers", "wb")
    children = [
        f"/apis/apps/v1/namespaces/{ns}/statefulsets/wb-server",
        f"/api/v1/namespaces/{ns}/services/wb",
        f"/api/v1/namespaces/{ns}/configmaps/wb-config",
        f"/api/v1/namespaces/{ns}/secrets/wb-default-user",
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/wb",
    ]
    kit.wait_for(
        lambda: all(plane.api("GET", path)[0] == 404 for path in children), 60, "children GC"
    )
    # The data outlives the Broker (persistentVolumeClaimRetentionPolicy: Retain).
    assert (
        plane.api("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data-wb-server-0")[0]
        == 200
    )


def test_namespace_deletion_is_not_held(
    running: Any, kit: Any, hutch_broker_factory: Any, tmp_path: Any
) -> None:
    """Deleting a namespace with a Broker and finalized topology objects finishes in bounded
    time: the namespace controller deletes the Broker (no finalizer) and the Queues, whose
    delete handler then releases its finalizer (docs/contracts/operator.md#deletion, BrokerGone)."""
    plane = running
    broker = hutch_broker_factory()
    kube = kit.Kube(plane, plane.create_namespace())
    ns = kube.namespace
    kit.set_broker_address(ns, "nb", broker)
    kube.secret("nb-default-user", {"username": broker.username, "password": broker.password})
    kube.create("Broker", "brokers", "nb", {"persistence": {"size": "0"}})
    kit.wait_for(
        lambda: kit.ready(kube.get("brokers", "nb"), "Available")[0] == "True", 60, "Available"
    )
    ref = {"brokerRef": {"name": "nb"}}
    kube.create("Queue", "queues", "kept", {**ref, "deletionPolicy": "retain"})
    kube.create("Queue", "queues", "plain", ref)
    kube.create("Exchange", "exchanges", "fan", {**ref, "type": "fanout"})
    for plural, name in (("queues", "kept"), ("queues", "plain"), ("exchanges", "fan")):
        kit.wait_for(lambda p=plural, n=name: kit.ready(kube.get(p, n))[0] == "True", 30, name)
        assert "hutch.dev/finalizer" in kube.get(plural, name)["metadata"]["finalizers"]

    plane.delete_namespace(ns)
    kit.wait_for(
        lambda: plane.api("GET", f"/api/v1/namespaces/{ns}")[0] == 404, 90, "namespace gone"
    )
    # The retained queue is still in the broker whatever order the namespace controller took.
    assert management.Management(broker).queue_exists("kept")
