"""RabbitMQ 3.10.8's own definitions exports import into hutch-broker (issue "Broker trust II").

Why: a definitions file is how an installation moves from RabbitMQ to Hutch, so every file
RabbitMQ exports must import. After a vhost's limits are cleared RabbitMQ keeps the
``vhost-limits`` parameter with its empty proplist as the value, ``[]``, and exports it so; that
one item used to fail the whole import with a 400. The vhost-limits parameter is the vhost's
whole set of limits, so an import replaces them, and ``[]`` clears them.
"""

from collections.abc import Iterator

import pytest
from hutch_demo.management import Management, quote

pytestmark = pytest.mark.rabbitmq


def _cleared_limits_item(vhost: str) -> dict[str, object]:
    return {"value": [], "vhost": vhost, "component": "vhost-limits", "name": "limits"}


@pytest.fixture
def vhost(target) -> Iterator[str]:
    name = target.name("vh")
    assert target.api.put(f"/vhosts/{quote(name)}", {}).status == 201
    yield name
    target.api.delete(f"/vhosts/{quote(name)}")


def test_cleared_limits_export_as_an_empty_list_and_import_back(target, vhost):
    api, vh = target.api, quote(vhost)
    assert api.put(f"/vhost-limits/{vh}/max-connections", {"value": 5}).status == 204
    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": 7}).status == 204

    imported = api.post("/definitions", {"parameters": [_cleared_limits_item(vhost)]})

    assert imported.status in (201, 204), imported.body
    assert api.get(f"/vhost-limits/{vh}").body == []


def test_an_imported_limits_parameter_replaces_the_vhost_s_limits(target, vhost):
    api, vh = target.api, quote(vhost)
    assert api.put(f"/vhost-limits/{vh}/max-connections", {"value": 5}).status == 204
    item = {**_cleared_limits_item(vhost), "value": {"max-queues": 3}}

    assert api.post("/definitions", {"parameters": [item]}).status in (201, 204)
    assert api.get(f"/vhost-limits/{vh}").body == [{"vhost": vhost, "value": {"max-queues": 3}}]


def test_the_per_vhost_import_and_the_parameters_api_take_an_empty_list_too(target, vhost):
    api, vh = target.api, quote(vhost)
    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": 7}).status == 204
    per_vhost = {"parameters": [{"value": [], "component": "vhost-limits", "name": "limits"}]}
    assert api.post(f"/definitions/{vh}", per_vhost).status in (201, 204)
    assert api.get(f"/vhost-limits/{vh}").body == []

    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": 7}).status == 204
    put = api.put(f"/parameters/vhost-limits/{vh}/limits", _cleared_limits_item(vhost))
    assert put.status in (201, 204), put.body
    assert api.get(f"/vhost-limits/{vh}").body == []


def _populate(api, vhost: str, user: str, parameter: str) -> None:
    """One of everything a definitions export holds, in its own vhost, with limits set and
    cleared, so the export carries both forms."""
    v = quote(vhost)
    steps = [
        ("put", f"/vhosts/{v}", {"description": "d", "tags": "a,b"}),
        ("put", f"/users/{quote(user)}", {"password": "p", "tags": "monitoring,policymaker"}),
        ("put", f"/permissions/{v}/{quote(user)}", {"configure": ".*", "write": "^a", "read": ""}),
        ("put", f"/topic-permissions/{v}/{quote(user)}", {"exchange": "amq.topic", "write": "^x", "read": ".*"}),
        ("put", f"/user-limits/{quote(user)}/max-connections", {"value": 3}),
        ("put", f"/user-limits/{quote(user)}/max-channels", {"value": 3}),
        ("delete", f"/user-limits/{quote(user)}/max-channels", None),
        ("put", f"/vhost-limits/{v}/max-queues", {"value": 100}),
        ("delete", f"/vhost-limits/{v}/max-queues", None),
        ("put", f"/policies/{v}/p1", {"pattern": "^q", "definition": {"max-length": 10, "overflow": "reject-publish", "dead-letter-exchange": "dlx"}, "priority": 1, "apply-to": "queues"}),
        ("put", f"/policies/{v}/p2", {"pattern": "^e", "definition": {"alternate-exchange": "ae"}, "apply-to": "exchanges"}),
        ("put", f"/operator-policies/{v}/op1", {"pattern": ".*", "definition": {"max-length": 1000, "message-ttl": 60000}, "apply-to": "queues"}),
        ("put", f"/global-parameters/{quote(parameter)}", {"value": {"a": [1, 2]}}),
        ("put", f"/exchanges/{v}/ex1", {"type": "topic", "arguments": {"alternate-exchange": "ae"}}),
        ("put", f"/exchanges/{v}/ex2", {"type": "headers", "auto_delete": True, "internal": True}),
        ("put", f"/exchanges/{v}/dlx", {"type": "fanout"}),
        ("put", f"/queues/{v}/q1", {"durable": True, "arguments": {"x-max-priority": 5, "x-message-ttl": 1000, "x-dead-letter-exchange": "dlx", "x-single-active-consumer": True}}),
        ("put", f"/queues/{v}/q2", {"durable": True, "arguments": {"x-queue-type": "quorum", "x-delivery-limit": 5}}),
        ("put", f"/queues/{v}/q3", {"durable": True, "arguments": {"x-queue-mode": "lazy", "x-max-length-bytes": 1000, "x-overflow": "drop-head", "x-expires": 100000}}),
        ("post", f"/bindings/{v}/e/ex1/q/q1", {"routing_key": "a.*.b", "arguments": {}}),
        ("post", f"/bindings/{v}/e/ex2/q/q3", {"routing_key": "", "arguments": {"x-match": "any", "h": "v", "n": 1}}),
        ("post", f"/bindings/{v}/e/ex1/e/ex2", {"routing_key": "#"}),
    ]  # fmt: skip
    for method, path, body in steps:
        reply = api.delete(path) if method == "delete" else getattr(api, method)(path, body)
        assert reply.ok, (path, reply.status, reply.body)


def test_a_whole_rabbitmq_export_imports_into_hutch(rabbitmq, hutch_broker):
    """The reference node's own exports, full and per vhost, of one of everything."""
    reference, hutch = Management(rabbitmq), Management(hutch_broker)
    vhost, user, parameter = "sbs-export-vh", "sbs-export-user", "sbs-export-parameter"
    try:
        _populate(reference, vhost, user, parameter)
        exported = reference.get("/definitions").body
        assert _cleared_limits_item(vhost) in exported["parameters"]

        imported = hutch.post("/definitions", exported)

        assert imported.status in (201, 204), imported.body
        assert hutch.get(f"/vhost-limits/{quote(vhost)}").body == []
        for path in (f"/queues/{quote(vhost)}/q2", f"/users/{quote(user)}", "/policies"):
            assert hutch.get(path).ok, path
        assert hutch.get(f"/user-limits/{quote(user)}").body == [
            {"user": user, "value": {"max-connections": 3}}
        ]
        per_vhost = reference.get(f"/definitions/{quote(vhost)}").body
        assert hutch.put("/vhosts/copy", {}).status == 201
        copied = hutch.post("/definitions/copy", per_vhost)
        assert copied.status in (201, 204), copied.body
        assert hutch.get("/queues/copy/q2").body["type"] == "quorum"
    finally:
        reference.delete(f"/vhosts/{quote(vhost)}")
        reference.delete(f"/users/{quote(user)}")
        reference.delete(f"/global-parameters/{quote(parameter)}")
