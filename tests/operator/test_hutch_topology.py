"""Topology CRs reconciled into a real hutch-broker by the operator running in-process.

One operator, one hutch-broker and one Broker CR for the whole module (each start costs seconds
on 2 cores); every test uses its own object names. The Broker's default-user Secret is created
up front with the test broker's guest credentials: the operator creates it only when absent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from hutch_demo import management
from hutch_testing.brokers import HutchBroker

pytestmark = pytest.mark.timeout(120)

BROKER = "b"


class Mgmt(management.Management):
    """hutch_testing's management client, with the shapes these tests read."""

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        reply = self.request(method, path.removeprefix("/api"), body)
        return reply.status, reply.body

    def queue(self, name: str) -> dict[str, Any] | None:  # type: ignore[override]
        reply = self.get(f"/queues/%2F/{name}")
        return reply.body if reply.status == 200 else None

    def publish(self, queue: str, count: int) -> None:
        for index in range(count):
            body = {"properties": {}, "routing_key": queue, "payload": str(index),
                    "payload_encoding": "string"}  # fmt: skip
            assert self.call("POST", "/api/exchanges/%2F/amq.default/publish", body)[0] == 200


@pytest.fixture(scope="module")
def env(
    operator: Any, crds_applied: Any, kit: Any, tmp_path_factory: Any
) -> Iterator[dict[str, Any]]:
    broker = HutchBroker(work_dir=tmp_path_factory.mktemp("hutch")).start()
    namespace = crds_applied.create_namespace()
    kube = kit.Kube(crds_applied, namespace)
    kit.set_broker_address(namespace, BROKER, broker)
    kube.secret(f"{BROKER}-default-user", {"username": "guest", "password": "guest"})
    kube.create("Broker", "brokers", BROKER, {"persistence": {"size": "2Gi"}})
    kit.wait_for(
        lambda: kit.ready(kube.get("brokers", BROKER), "Available")[0] == "True", 30, "Available"
    )
    try:
        yield {"kube": kube, "mgmt": Mgmt(broker), "broker": broker}
    finally:
        broker.stop()


def _queue(env: dict[str, Any], cr: str, **spec: Any) -> None:
    env["kube"].create("Queue", "queues", cr, {"brokerRef": {"name": BROKER}, **spec})


def _wait_ready(
    kit: Any, env: dict[str, Any], plural: str, name: str, want: str = "True", reason: str = ""
) -> Any:
    def check() -> Any:
        obj = env["kube"].get(plural, name)
        status, why = kit.ready(obj)
        return obj if status == want and (not reason or why == reason) else None

    return kit.wait_for(check, 20, f"{plural}/{name} Ready={want} {reason}")


def test_broker_children_and_status(env: dict[str, Any], crds_applied: Any, kit: Any) -> None:
    kube, ns = env["kube"], env["kube"].namespace
    broker = kube.get("brokers", BROKER)
    status = broker["status"]
    assert status["memory"] == {
        "basis": "Request",
        "relative": "0.4",
        "basisBytes": 536870912,
        "highWatermarkBytes": 214748364,
    }
    assert status["diskFreeLimitBytes"] == 107374182
    assert status["defaultUserSecret"] == "b-default-user"
    assert status["observedGeneration"] == 1
    assert kit.ready(broker, "NoWarnings") == ("True", "NoWarnings")
    # The apiserver tier has no controllers, so no pod: Ready is False, Available is True.
    assert kit.ready(broker, "Ready") == ("False", "PodNotReady")
    _, cm = crds_applied.api("GET", f"/api/v1/namespaces/{ns}/configmaps/b-config")
    assert "vm_memory_high_watermark.absolute = 214748364" in cm["data"]["hutch-broker.conf"]
    sts_path = f"/apis/apps/v1/namespaces/{ns}/statefulsets/b-server"
    _, sts = crds_applied.api("GET", sts_path)
    owner = sts["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["controller"]) == ("Broker", True)
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    config_hash = sts["spec"]["template"]["metadata"]["annotations"]["hutch.dev/config-hash"]
    for path in (f"/api/v1/namespaces/{ns}/services/b", f"/api/v1/namespaces/{ns}/services/b-nodes",
                 f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/b"):  # fmt: skip
        assert crds_applied.api("GET", path)[0] == 200, path

    # A higher fraction rewrites the config, rolls the pod (hash) and warns.
    assert kube.patch_spec("brokers", BROKER, {"memoryHighWatermark": 0.6}).returncode == 0

    def rolled() -> bool:
        annotations = crds_applied.api("GET", sts_path)[1]["spec"]["template"]["metadata"]
        return annotations["annotations"]["hutch.dev/config-hash"] != config_hash

    kit.wait_for(rolled, 20, "config hash change")
    kit.wait_for(
        lambda: (
            kit.ready(kube.get("brokers", BROKER), "NoWarnings") == ("False", "WatermarkAboveHalf")
        ),
        20,
        "WatermarkAboveHalf",
    )
    assert kube.get("brokers", BROKER)["status"]["memory"]["highWatermarkBytes"] == 322122547
    kube.wait_reason(BROKER, "WatermarkAboveHalf")

    # Shrinking the volume is refused and not applied.
    assert kube.patch_spec("brokers", BROKER, {"persistence": {"size": "1Gi"}}).returncode == 0
    kit.wait_for(
        lambda: (
            kit.ready(kube.get("brokers", BROKER), "ReconcileSuccess")[1] == "UnsupportedOperation"
        ),
        20,
        "UnsupportedOperation",
    )
    claim = crds_applied.api("GET", sts_path)[1]["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    kube.patch_spec("brokers", BROKER, {"persistence": {"size": "2Gi"}, "memoryHighWatermark": 0.4})


def test_queue_lifecycle_keeps_messages(env: dict[str, Any], kit: Any) -> None:
    kube, mgmt = env["kube"], env["mgmt"]
    _queue(env, "orders", limits={"maxLength": 100, "messageTtl": 60000})
    obj = _wait_ready(kit, env, "queues", "orders")
    assert obj["status"]["observedGeneration"] == 1
    assert mgmt.queue("orders")["arguments"] == {"x-max-length": 100, "x-message-ttl": 60000}
    # The declare created the queue: its counts are in the Ready write, without a read, and the
    # success posts no Event (the Ready condition says it).
    assert (obj["status"]["messages"], obj["status"]["consumers"]) == (0, 0)
    assert "Declared" not in kube.reasons("orders")

    mgmt.publish("orders", 3)
    kit.wait_for(lambda: kube.get("queues", "orders")["status"].get("messages") == 3, 20, "stats")

    kube.delete("queues", "orders")
    kit.wait_for(lambda: kube.get("queues", "orders") is None, 20, "CR gone")
    assert mgmt.queue("orders")["messages"] == 3  # deleteIfEmpty (default) kept it
    kube.wait_reason("orders", "DeleteSkippedNotEmpty")


def test_empty_queue_is_deleted_and_retain_is_kept(env: dict[str, Any], kit: Any) -> None:
    kube, mgmt = env["kube"], env["mgmt"]
    _queue(env, "scratch")
    _queue(env, "kept", deletionPolicy="retain")
    _wait_ready(kit, env, "queues", "scratch")
    _wait_ready(kit, env, "queues", "kept")
    kube.delete("queues", "scratch")
    kube.delete("queues", "kept")
    kit.wait_for(lambda: kube.get("queues", "scratch") is None, 20, "scratch gone")
    kit.wait_for(lambda: kube.get("queues", "kept") is None, 20, "kept gone")
    assert mgmt.queue("scratch") is None
    assert mgmt.queue("kept") is not None
    kube.wait_reason("kept", "Retained")


def test_limits_change_in_place(env: dict[str, Any], kit: Any) -> None:
    kube, mgmt = env["kube"], env["mgmt"]
    _queue(env, "ring", limits={"maxLength": 10})
    _wait_ready(kit, env, "queues", "ring")
    mgmt.publish("ring", 6)
    assert kube.patch_spec("queues", "ring", {"limits": {"maxLength": 2}}).returncode == 0
    obj = kit.wait_for(
        lambda: (o := kube.get("queues", "ring"))["status"].get("observedGeneration") == 2 and o,
        20,
        "generation 2 handled",
    )
    assert kit.ready(obj) == ("True", "Declared")  # PUT /api/queues/{vh}/{q}/arguments
    queue = mgmt.queue("ring")
    assert queue["arguments"] == {"x-max-length": 2}
    assert queue["messages"] == 2  # a lowered max-length truncates at once


def test_drift_is_corrected(env: dict[str, Any], kit: Any) -> None:
    kube, mgmt = env["kube"], env["mgmt"]
    _queue(env, "drifty")
    _wait_ready(kit, env, "queues", "drifty")
    assert mgmt.call("DELETE", "/api/queues/%2F/drifty")[0] == 204
    kit.wait_for(lambda: mgmt.queue("drifty") is not None, 20, "re-declared")
    kit.wait_for(lambda: "DriftCorrected" in kube.reasons("drifty"), 10, "DriftCorrected event")

    spec = {"brokerRef": {"name": BROKER}, "pattern": "^drift", "definition": {"max-length": 5}}
    kube.create("Policy", "policies", "drift-pol", spec)
    _wait_ready(kit, env, "policies", "drift-pol")
    changed = {"pattern": "^other", "definition": {"max-length": 9}, "apply-to": "all"}
    assert mgmt.call("PUT", "/api/policies/%2F/drift-pol", changed)[0] in (201, 204)
    kit.wait_for(
        lambda: mgmt.call("GET", "/api/policies/%2F/drift-pol")[1]["pattern"] == "^drift",
        20,
        "policy restored",
    )


def test_conflict_oldest_wins_and_hands_over(env: dict[str, Any], kit: Any) -> None:
    kube, mgmt = env["kube"], env["mgmt"]
    _queue(env, "first", name="shared")
    _wait_ready(kit, env, "queues", "first")
    _queue(env, "second", name="shared")
    obj = _wait_ready(kit, env, "queues", "second", "False", "ResourceConflict")
    assert obj["status"]["conflictWith"] == f"{kube.namespace}/first"
    kube.delete("queues", "first")  # the winner leaves: the queue stays, "second" takes over
    _wait_ready(kit, env, "queues", "second", "True")
    assert mgmt.queue("shared") is not None
    assert "conflictWith" not in kube.get("queues", "second")["status"]


def test_exchange_binding_and_operator_policy(env: dict[str, Any], kit: Any) -> None:
    kube, mgmt = env["kube"], env["mgmt"]
    ref = {"brokerRef": {"name": BROKER}}
    kube.create("Exchange", "exchanges", "events", {**ref, "type": "topic"})
    _queue(env, "audit")
    kube.create("Binding", "bindings", "events-audit",
                {**ref, "source": "events", "destination": "audit", "routingKey": "a.*"})  # fmt: skip
    spec = {**ref, "pattern": "^audit$", "definition": {"max-length": 7}}
    kube.create("OperatorPolicy", "operatorpolicies", "cap", spec)
    for plural, name in (("exchanges", "events"), ("bindings", "events-audit"),
                         ("operatorpolicies", "cap")):  # fmt: skip
        _wait_ready(kit, env, plural, name)
    assert mgmt.call("GET", "/api/exchanges/%2F/events")[1]["type"] == "topic"
    _, bindings = mgmt.call("GET", "/api/bindings/%2F/e/events/q/audit")
    assert [b["routing_key"] for b in bindings] == ["a.*"]
    kit.wait_for(
        lambda: kube.get("queues", "audit")["status"].get("operatorPolicy") == "cap", 20, "stats"
    )
    kube.delete("bindings", "events-audit")
    kit.wait_for(lambda: kube.get("bindings", "events-audit") is None, 20, "binding CR gone")
    assert mgmt.call("GET", "/api/bindings/%2F/e/events/q/audit")[1] == []


def test_quorum_queue_cr_is_declared_on_one_replica(env: dict[str, Any], kit: Any) -> None:
    """A Queue CR written for the RabbitMQ topology operator (type: quorum) works on Hutch."""
    _queue(env, "quorum-q", type="quorum", arguments={"x-delivery-limit": 3})
    _wait_ready(kit, env, "queues", "quorum-q")
    item = env["mgmt"].queue("quorum-q")
    assert item is not None
    assert (item["type"], item["durable"], item["arguments"]) == (
        "quorum",
        True,
        {"x-delivery-limit": 3, "x-queue-type": "quorum"},
    )


def test_invalid_and_unresolvable_specs(env: dict[str, Any], kit: Any) -> None:
    kube = env["kube"]
    # A malformed x-max-age in a stream's arguments passes the CRD (a regex over an argument
    # of unbounded length is beyond CEL's cost budget); the model refuses it, no broker call.
    _queue(env, "stream-q", type="stream", arguments={"x-max-age": "7 days"})
    obj = _wait_ready(kit, env, "queues", "stream-q", "False", "InvalidSpec")
    assert (
        "x-max-age in arguments is a positive number" in obj["status"]["conditions"][0]["message"]
    )
    assert env["mgmt"].queue("stream-q") is None
    kube.create("Queue", "queues", "orphan", {"brokerRef": {"name": "nope"}})
    _wait_ready(kit, env, "queues", "orphan", "False", "BrokerNotFound")
    # Immutable fields are refused by the apiserver with the field's name.
    refused = kube.patch_spec("queues", "stream-q", {"durable": False})
    assert refused.returncode != 0
    assert "durable is immutable" in refused.stderr


def test_unreachable_broker_is_bounded(env: dict[str, Any], kit: Any, tmp_path: Any) -> None:
    kube = env["kube"]
    kube.secret("dead", {"uri": "http://127.0.0.1:9", "username": "u", "password": "p"})
    kube.create("Queue", "queues", "never", {"connectionSecret": {"name": "dead"}})
    obj = _wait_ready(kit, env, "queues", "never", "False", "BrokerUnavailable")
    assert "127.0.0.1:9" in obj["status"]["conditions"][0]["message"]
    # Never declared, so nothing to delete: released at once, without waiting for the broker.
    kube.delete("queues", "never")
    kit.wait_for(lambda: kube.get("queues", "never") is None, 5, "finalizer released")
    kube.wait_reason("never", "DeleteSkippedNotOwned")

    # Declared, then the broker goes away: retried until HUTCH_DELETE_TIMEOUT (6 s), released.
    doomed = HutchBroker(work_dir=tmp_path / "doomed").start()
    try:
        kube.secret("doomed", {"uri": doomed.http_url, "username": "guest", "password": "guest"})
        kube.create("Queue", "queues", "stranded", {"connectionSecret": {"name": "doomed"}})
        _wait_ready(kit, env, "queues", "stranded")
    finally:
        doomed.stop()
    kube.delete("queues", "stranded")
    kit.wait_for(lambda: kube.get("queues", "stranded") is None, 40, "finalizer released")
    kube.wait_reason("stranded", "DeleteAbandoned")


def test_wrong_credentials_are_authentication_failed(env: dict[str, Any], kit: Any) -> None:
    kube, broker, mgmt = env["kube"], env["broker"], env["mgmt"]
    kube.secret("wrong", {"uri": broker.http_url, "username": "guest", "password": "not-it"})
    kube.create("Queue", "queues", "locked-out", {"connectionSecret": {"name": "wrong"}})
    obj = _wait_ready(kit, env, "queues", "locked-out", "False", "AuthenticationFailed")
    assert "401" in obj["status"]["conditions"][0]["message"]
    kube.wait_reason("locked-out", "AuthenticationFailed")
    assert mgmt.queue("locked-out") is None

    # A queue declared with a password that is then changed: deleting it meets a 401 and is
    # released after HUTCH_DELETE_TIMEOUT (6 s here), not after the 60 s retry delay.
    user = {"password": "first", "tags": "management"}
    assert mgmt.call("PUT", "/api/users/tenant", user)[0] in (201, 204)
    grant = {"configure": ".*", "write": ".*", "read": ".*"}
    assert mgmt.call("PUT", "/api/permissions/%2F/tenant", grant)[0] in (201, 204)
    kube.secret("tenant", {"uri": broker.http_url, "username": "tenant", "password": "first"})
    kube.create("Queue", "queues", "rotated", {"connectionSecret": {"name": "tenant"}})
    _wait_ready(kit, env, "queues", "rotated")
    assert mgmt.call("PUT", "/api/users/tenant", {"password": "second"})[0] in (201, 204)
    began = time.monotonic()
    kube.delete("queues", "rotated")
    kit.wait_for(lambda: kube.get("queues", "rotated") is None, 30, "finalizer released")
    assert time.monotonic() - began < 20
    kube.wait_reason("rotated", "DeleteAbandoned")
    assert mgmt.queue("rotated") is not None


def test_broker_gone_and_namespace_not_allowed(
    env: dict[str, Any], crds_applied: Any, kit: Any
) -> None:
    kube = env["kube"]
    other = kit.Kube(crds_applied, crds_applied.create_namespace())
    spec = {"brokerRef": {"name": BROKER, "namespace": kube.namespace}}
    other.create("Queue", "queues", "foreign", spec)
    obj = kit.wait_for(
        lambda: (
            (o := other.get("queues", "foreign")) and kit.ready(o)[1] == "NamespaceNotAllowed" and o
        ),
        20,
        "NamespaceNotAllowed",
    )
    assert other.namespace in obj["status"]["conditions"][0]["message"]

    # A Broker that never became Available, then deleted: its Queue (never declared, so
    # nothing of its own in any broker) is released at once.
    kube.create("Broker", "brokers", "ghost", {"persistence": {"size": "0"}})
    kube.create("Queue", "queues", "haunted", {"brokerRef": {"name": "ghost"}})
    _wait_ready(kit, env, "queues", "haunted", "False", "BrokerNotReady")
    kube.delete("brokers", "ghost")
    kit.wait_for(lambda: kube.get("brokers", "ghost") is None, 20, "Broker gone")
    kube.delete("queues", "haunted")
    kit.wait_for(lambda: kube.get("queues", "haunted") is None, 20, "Queue released")
    kube.wait_reason("haunted", "DeleteSkippedNotOwned")

    # A declared Queue whose Broker is deleted first: released at once (BrokerGone), no call.
    kit.set_broker_address(kube.namespace, "brief", env["broker"])
    kube.secret("brief-default-user", {"username": "guest", "password": "guest"})
    kube.create("Broker", "brokers", "brief", {"persistence": {"size": "0"}})
    kube.create("Queue", "queues", "bereft", {"brokerRef": {"name": "brief"}})
    _wait_ready(kit, env, "queues", "bereft")
    kube.delete("brokers", "brief")
    kit.wait_for(lambda: kube.get("brokers", "brief") is None, 20, "Broker gone")
    kube.delete("queues", "bereft")
    kit.wait_for(lambda: kube.get("queues", "bereft") is None, 20, "Queue released")
    kube.wait_reason("bereft", "BrokerGone")
    assert env["mgmt"].queue("bereft") is not None
