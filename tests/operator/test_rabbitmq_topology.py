"""Queue, Policy and OperatorPolicy against the reference RabbitMQ 3.10.8 via connectionSecret.

The same CRDs manage any RabbitMQ-compatible broker: here the operator learns from
``/api/overview`` that it is not Hutch, turns ``ringSize`` into max-length + drop-head, and
answers a later limit change with ``ArgumentsImmutable`` (pointing to Policy) instead of
deleting the queue and its messages.
"""

from __future__ import annotations

from typing import Any

import pytest
from hutch_demo import management

pytestmark = pytest.mark.timeout(120)


def _call(node: Any, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    reply = management.Management(node).request(method, path.removeprefix("/api"), body)
    return reply.status, reply.body


@pytest.fixture(scope="module")
def env(operator: Any, crds_applied: Any, kit: Any, rabbitmq: Any) -> dict[str, Any]:
    kube = kit.Kube(crds_applied, crds_applied.create_namespace())
    kube.secret(
        "rabbit",
        {"uri": rabbitmq.http_url, "username": rabbitmq.username, "password": rabbitmq.password},
    )
    return {"kube": kube, "node": rabbitmq, "ref": {"connectionSecret": {"name": "rabbit"}}}


def _wait(kit: Any, kube: Any, plural: str, name: str, want: tuple[str, str]) -> Any:
    def check() -> Any:
        obj = kube.get(plural, name)
        return obj if kit.ready(obj) == want else None

    return kit.wait_for(check, 20, f"{plural}/{name} {want}")


def test_queue_ring_and_immutable_limits(env: dict[str, Any], kit: Any) -> None:
    kube, node = env["kube"], env["node"]
    spec = {**env["ref"], "name": "ref-ring", "limits": {"ringSize": 3, "messageTtl": 5000}}
    kube.create("Queue", "queues", "ring", spec)
    _wait(kit, kube, "queues", "ring", ("True", "Declared"))
    _, queue = _call(node, "GET", "/api/queues/%2F/ref-ring")
    assert queue["arguments"] == {
        "x-max-length": 3,
        "x-overflow": "drop-head",
        "x-message-ttl": 5000,
    }
    kube.patch_spec("queues", "ring", {"limits": {"ringSize": 5}})
    obj = _wait(kit, kube, "queues", "ring", ("False", "ArgumentsImmutable"))
    assert "Policy" in obj["status"]["conditions"][0]["message"]
    assert _call(node, "GET", "/api/queues/%2F/ref-ring")[1]["arguments"]["x-max-length"] == 3
    kube.delete("queues", "ring")
    kit.wait_for(lambda: kube.get("queues", "ring") is None, 20, "CR gone")
    assert _call(node, "GET", "/api/queues/%2F/ref-ring")[0] == 404  # it was empty


def test_policy_and_operator_policy(env: dict[str, Any], kit: Any) -> None:
    kube, node = env["kube"], env["node"]
    ref = env["ref"]
    kube.create("Policy", "policies", "lengths",
                {**ref, "pattern": "^ref-", "applyTo": "queues", "priority": 3,
                 "definition": {"max-length": 50}})  # fmt: skip
    kube.create("OperatorPolicy", "operatorpolicies", "caps",
                {**ref, "pattern": "^ref-", "definition": {"max-length": 20}})  # fmt: skip
    _wait(kit, kube, "policies", "lengths", ("True", "Declared"))
    _wait(kit, kube, "operatorpolicies", "caps", ("True", "Declared"))
    _, policy = _call(node, "GET", "/api/policies/%2F/lengths")
    assert (policy["pattern"], policy["priority"], policy["definition"]) == (
        "^ref-", 3, {"max-length": 50},
    )  # fmt: skip
    _, operator_policy = _call(node, "GET", "/api/operator-policies/%2F/caps")
    assert operator_policy["definition"] == {"max-length": 20}
    kube.patch_spec("policies", "lengths", {"definition": {"max-length": 40}})
    kit.wait_for(
        lambda: (
            _call(node, "GET", "/api/policies/%2F/lengths")[1]["definition"] == {"max-length": 40}
        ),
        20,
        "policy updated in place",
    )
    # A definition RabbitMQ refuses is BrokerRejected, with the broker's reason.
    kube.create(
        "Policy", "policies", "bad", {**ref, "pattern": ".", "definition": {"max-length": "x"}}
    )
    obj = _wait(kit, kube, "policies", "bad", ("False", "BrokerRejected"))
    assert "not a valid maximum length" in obj["status"]["conditions"][0]["message"]
    for plural, name in (
        ("policies", "lengths"),
        ("operatorpolicies", "caps"),
        ("policies", "bad"),
    ):
        kube.delete(plural, name)
    kit.wait_for(lambda: kube.get("operatorpolicies", "caps") is None, 20, "gone")
    assert _call(node, "GET", "/api/operator-policies/%2F/caps")[0] == 404


def test_status_counts_right_after_the_declare(env: dict[str, Any], kit: Any) -> None:
    """RabbitMQ answers a PUT that creates a queue with 201 and one that finds it with 204: the
    operator writes zero counts for the first without reading them, and reads the second's (an
    application's queue holding a message) before its first Ready."""
    kube, node = env["kube"], env["node"]
    queue = {"durable": True, "auto_delete": False, "arguments": {}}
    assert _call(node, "PUT", "/api/queues/%2F/ref-probe", queue)[0] == 201
    assert _call(node, "PUT", "/api/queues/%2F/ref-probe", queue)[0] == 204
    assert _call(node, "DELETE", "/api/queues/%2F/ref-probe")[0] == 204
    assert _call(node, "PUT", "/api/queues/%2F/ref-app", queue)[0] == 201
    message = {"properties": {}, "routing_key": "ref-app", "payload": "x",
               "payload_encoding": "string"}  # fmt: skip
    assert _call(node, "POST", "/api/exchanges/%2F/amq.default/publish", message)[1]["routed"]
    kit.wait_for(lambda: _call(node, "GET", "/api/queues/%2F/ref-app")[1].get("messages") == 1,
                 20, "RabbitMQ's stats")  # fmt: skip
    kube.create("Queue", "queues", "fresh", {**env["ref"], "name": "ref-fresh"})
    kube.create("Queue", "queues", "app", {**env["ref"], "name": "ref-app"})
    fresh = _wait(kit, kube, "queues", "fresh", ("True", "Declared"))
    app = _wait(kit, kube, "queues", "app", ("True", "Declared"))
    assert (fresh["status"]["messages"], fresh["status"]["consumers"]) == (0, 0)
    assert "effectivePolicyDefinition" not in fresh["status"]  # left to the sweep
    assert app["status"]["messages"] == 1
    assert app["status"]["effectivePolicyDefinition"] == {}
    for name in ("fresh", "app"):
        kube.patch_spec("queues", name, {"deletionPolicy": "retain"})
        kube.delete("queues", name)
    _call(node, "DELETE", "/api/queues/%2F/ref-fresh")
    _call(node, "DELETE", "/api/queues/%2F/ref-app")
