"""Trust and tenancy on a real kube-apiserver and hutch-broker: who may touch a broker object.

The operator runs as a child process with the drift sweep off (``HUTCH_SYNC_PERIOD=0``): the
in-process operator of the other modules sweeps every 2 s, which would hide a loser that is
only woken by its next tick (hand-over) and keep re-declaring what the tests check is left
alone. Each test says which defect of "Operator trust and tenancy" it pins.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import management
from hutch_testing.brokers import HutchBroker

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
BROKER = "hutch"


class Mgmt(management.Management):
    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        reply = self.request(method, path.removeprefix("/api"), body)
        return reply.status, reply.body

    def queue(self, name: str) -> dict[str, Any] | None:  # type: ignore[override]
        status, body = self.call("GET", f"/api/queues/%2F/{name}")
        return body if status == 200 else None

    def publish(self, exchange: str, routing_key: str, count: int) -> None:
        for index in range(count):
            body = {"properties": {}, "routing_key": routing_key, "payload": str(index),
                    "payload_encoding": "string"}  # fmt: skip
            status, reply = self.call("POST", f"/api/exchanges/%2F/{exchange}/publish", body)
            assert status == 200 and reply.get("routed"), reply


@pytest.fixture(scope="module")
def env(crds_applied: Any, kit: Any, tmp_path_factory: Any) -> Iterator[dict[str, Any]]:
    plane = crds_applied
    broker = HutchBroker(work_dir=tmp_path_factory.mktemp("hutch")).start()
    home, team_a, outsider = (plane.create_namespace() for _ in range(3))
    kube = kit.Kube(plane, home)
    kube.secret(f"{BROKER}-default-user", {"username": "guest", "password": "guest"})
    kube.create("Broker", "brokers", BROKER,
                {"persistence": {"size": "0"}, "topologyAllowedNamespaces": [team_a]})  # fmt: skip
    log_path = tmp_path_factory.mktemp("operator") / "operator.log"
    environment = {
        **os.environ, "KUBECONFIG": str(plane.kubeconfig), "HUTCH_SYNC_PERIOD": "0",
        "HUTCH_BROKER_STATUS_PERIOD": "2", "HUTCH_DELETE_TIMEOUT": "6", "HUTCH_METRICS_PORT": "0",
        "HUTCH_BROKER_ADDRESSES": f"{home}/{BROKER}={broker.http_url}|{broker.amqp_url}",
        "PYTHONPATH": str(REPO / "operator"),
    }  # fmt: skip
    with log_path.open("wb") as log:
        operator = subprocess.Popen(
            [sys.executable, "-m", "hutch_operator", "--standalone", "--all-namespaces"],
            env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        kit.wait_for(lambda: kit.ready(kube.get("brokers", BROKER), "Available")[0] == "True",
                     60, "Broker Available")  # fmt: skip
        yield {"kube": kube, "team_a": kit.Kube(plane, team_a),
               "outsider": kit.Kube(plane, outsider), "mgmt": Mgmt(broker), "broker": broker,
               "log": log_path}  # fmt: skip
    finally:
        operator.terminate()
        try:
            operator.wait(20)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
        broker.stop()


def _wait(kit: Any, kube: Any, plural: str, name: str, want: tuple[str, str]) -> Any:
    def check() -> Any:
        obj = kube.get(plural, name)
        return obj if kit.ready(obj) == want else None

    return kit.wait_for(check, 30, f"{kube.namespace} {plural}/{name} {want}")


def _younger() -> None:
    """creationTimestamp has one-second resolution and ties go to namespace/name order: wait so
    the next object is unambiguously younger."""
    time.sleep(1.1)


def _gone(kit: Any, kube: Any, plural: str, name: str) -> None:
    kit.wait_for(lambda: kube.get(plural, name) is None, 30, f"{plural}/{name} deleted")


def test_same_queue_reached_two_ways_is_a_conflict(env: dict[str, Any], kit: Any) -> None:
    """Defect 1: brokerRef and connectionSecret to one broker no longer both own `shared`."""
    kube, mgmt, broker = env["kube"], env["mgmt"], env["broker"]
    # The same broker as the Broker's address, spelled differently (case, trailing slash).
    uri = broker.http_url.replace("http://", "HTTP://") + "/"
    kube.secret("same-broker", {"uri": uri, "username": "guest", "password": "guest"})
    ref, secret = {"brokerRef": {"name": BROKER}}, {"connectionSecret": {"name": "same-broker"}}

    kube.create("Queue", "queues", "a", {**ref, "name": "shared", "limits": {"maxLength": 20}})
    _wait(kit, kube, "queues", "a", ("True", "Declared"))
    mgmt.publish("amq.default", "shared", 15)
    _younger()
    kube.create("Queue", "queues", "b", {**secret, "name": "shared", "limits": {"maxLength": 5}})
    obj = _wait(kit, kube, "queues", "b", ("False", "ResourceConflict"))
    assert obj["status"]["conflictWith"] == f"{kube.namespace}/a"
    time.sleep(2)
    queue = mgmt.queue("shared")
    assert queue is not None
    assert (queue["arguments"], queue["messages"]) == ({"x-max-length": 20}, 15)

    # The other way round: the Secret's object is older, the brokerRef one loses.
    kube.create("Queue", "queues", "c", {**secret, "name": "shared-2"})
    _wait(kit, kube, "queues", "c", ("True", "Declared"))
    _younger()
    kube.create("Queue", "queues", "d", {**ref, "name": "shared-2"})
    obj = _wait(kit, kube, "queues", "d", ("False", "ResourceConflict"))
    assert obj["status"]["conflictWith"] == f"{kube.namespace}/c"


def test_refused_exchange_is_left_alone_on_delete(env: dict[str, Any], kit: Any) -> None:
    """Defect 2: deleting a CR whose declare was refused keeps the application's exchange."""
    kube, mgmt = env["kube"], env["mgmt"]
    body = {"type": "direct", "durable": True, "auto_delete": False, "arguments": {}}
    assert mgmt.call("PUT", "/api/exchanges/%2F/app-events", body)[0] in (201, 204)
    queue = {"durable": True, "auto_delete": False, "arguments": {}}
    assert mgmt.call("PUT", "/api/queues/%2F/app-sink", queue)[0] in (201, 204)
    binding = {"routing_key": "k", "arguments": {}}
    assert mgmt.call("POST", "/api/bindings/%2F/e/app-events/q/app-sink", binding)[0] == 201
    mgmt.publish("app-events", "k", 3)

    spec = {"brokerRef": {"name": BROKER}, "name": "app-events", "type": "topic"}
    kube.create("Exchange", "exchanges", "events", spec)
    obj = _wait(kit, kube, "exchanges", "events", ("False", "BrokerRejected"))
    assert "inequivalent" in obj["status"]["conditions"][0]["message"]
    kube.delete("exchanges", "events")
    _gone(kit, kube, "exchanges", "events")

    status, exchange = mgmt.call("GET", "/api/exchanges/%2F/app-events")
    assert (status, exchange["type"]) == (200, "direct")
    _, bindings = mgmt.call("GET", "/api/bindings/%2F/e/app-events/q/app-sink")
    assert [b["routing_key"] for b in bindings] == ["k"]
    assert mgmt.queue("app-sink")["messages"] == 3
    kube.wait_reason("events", "DeleteSkippedNotOwned")
    [event] = [e for e in kube.events("events") if e["reason"] == "DeleteSkippedNotOwned"]
    assert "left alone" in event["message"]


def test_refused_queue_is_left_alone_on_delete(env: dict[str, Any], kit: Any) -> None:
    """Defect 2: a refused Queue (deleteIfEmpty false) deletes neither queue nor messages, and
    a lower limit is not forced onto an application's queue it did not declare."""
    kube, mgmt = env["kube"], env["mgmt"]
    queue = {"durable": True, "auto_delete": False, "arguments": {"x-max-length": 20}}
    assert mgmt.call("PUT", "/api/queues/%2F/app-orders", queue)[0] in (201, 204)
    mgmt.publish("amq.default", "app-orders", 3)

    ref = {"brokerRef": {"name": BROKER}, "name": "app-orders", "deleteIfEmpty": False}
    kube.create("Queue", "queues", "orders-transient", {**ref, "durable": False})
    _wait(kit, kube, "queues", "orders-transient", ("False", "BrokerRejected"))
    _younger()
    kube.create("Queue", "queues", "orders-short", {**ref, "limits": {"maxLength": 1}})
    _wait(kit, kube, "queues", "orders-short", ("False", "ResourceConflict"))
    kube.delete("queues", "orders-transient")  # the short one takes over, and is refused
    _gone(kit, kube, "queues", "orders-transient")
    _wait(kit, kube, "queues", "orders-short", ("False", "BrokerRejected"))
    listed = mgmt.queue("app-orders")
    assert listed is not None
    assert (listed["arguments"], listed["messages"]) == ({"x-max-length": 20}, 3)

    kube.delete("queues", "orders-short")
    _gone(kit, kube, "queues", "orders-short")
    listed = mgmt.queue("app-orders")
    assert listed is not None and listed["messages"] == 3
    kube.wait_reason("orders-short", "DeleteSkippedNotOwned")


def test_owned_queue_is_still_deleted(env: dict[str, Any], kit: Any) -> None:
    """Defect 2, the other side: what the object declared itself is deleted as before."""
    kube, mgmt = env["kube"], env["mgmt"]
    kube.create("Queue", "queues", "mine", {"brokerRef": {"name": BROKER}})
    obj = _wait(kit, kube, "queues", "mine", ("True", "Declared"))
    assert obj["status"]["declared"] is True
    assert obj["status"]["brokerEndpoint"] == env["broker"].http_url
    kube.delete("queues", "mine")
    _gone(kit, kube, "queues", "mine")
    assert mgmt.queue("mine") is None


def test_outsider_claims_do_not_block_an_admitted_tenant(env: dict[str, Any], kit: Any) -> None:
    """Defect 3: an older Queue from a namespace the Broker does not admit never wins."""
    home, team_a, outsider = env["kube"].namespace, env["team_a"], env["outsider"]
    spec = {"brokerRef": {"name": BROKER, "namespace": home}, "name": "payments"}
    outsider.create("Queue", "queues", "payments", spec)
    _wait(kit, outsider, "queues", "payments", ("False", "NamespaceNotAllowed"))
    _younger()
    team_a.create("Queue", "queues", "payments", spec)
    _wait(kit, team_a, "queues", "payments", ("True", "Declared"))
    assert env["mgmt"].queue("payments") is not None
    assert kit.ready(outsider.get("queues", "payments")) == ("False", "NamespaceNotAllowed")


@pytest.mark.parametrize("policy", ["delete", "retain"])
def test_hand_over_is_prompt(env: dict[str, Any], kit: Any, policy: str) -> None:
    """Defect 4: the loser takes over when the winner goes, without waiting for a sweep."""
    kube, mgmt = env["kube"], env["mgmt"]
    name = f"handed-{policy}"
    ref = {"brokerRef": {"name": BROKER}, "name": name}
    kube.create("Queue", "queues", f"{name}-winner", {**ref, "deletionPolicy": policy})
    _wait(kit, kube, "queues", f"{name}-winner", ("True", "Declared"))
    _younger()
    kube.create("Queue", "queues", f"{name}-loser", ref)
    _wait(kit, kube, "queues", f"{name}-loser", ("False", "ResourceConflict"))
    kube.delete("queues", f"{name}-winner")
    _gone(kit, kube, "queues", f"{name}-winner")
    obj = _wait(kit, kube, "queues", f"{name}-loser", ("True", "Declared"))
    assert "conflictWith" not in obj["status"]
    assert mgmt.queue(name) is not None
    kube.wait_reason(f"{name}-winner", "HandedOver")
