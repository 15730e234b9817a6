"""Exchanges, queues and bindings over HTTP: status codes, error bodies, no change on bad input."""

import pytest


async def test_api_5_exchange_lifecycle(api, broker):
    created = await api.put("/api/exchanges/%2F/x", {"type": "direct", "durable": False})
    assert (created.status, created.body) == (201, None)
    again = await api.put("/api/exchanges/%2F/x", {"type": "direct", "durable": "false"})
    assert again.status == 204
    listed = await api.get("/api/exchanges/%2F")
    assert "x" in [item["name"] for item in listed.body]
    assert (await api.get("/api/exchanges")).status == 200
    assert (await api.delete("/api/exchanges/%2F/x")).status == 204
    assert "x" not in broker.vhosts["/"].exchanges
    missing = await api.delete("/api/exchanges/%2F/x")
    assert (missing.status, missing.body) == (
        404,
        {"error": "Object Not Found", "reason": "Not Found"},
    )


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({}, 400, "[{key_missing,type}]"),
        ({"type": "fancy"}, 400, "unknown exchange type 'fancy'"),
        ({"type": "direct", "durable": "maybe"}, 400, None),
        ({"type": "direct", "arguments": [1]}, 400, None),
    ],
)
async def test_api_5_bad_exchange_bodies_change_nothing(api, broker, body, status, reason):
    reply = await api.put("/api/exchanges/%2F/bad.x", body)
    assert reply.status == status
    assert reply.body["error"] == "bad_request"
    if reason is not None:
        assert reply.body["reason"] == reason
    assert "bad.x" not in broker.vhosts["/"].exchanges


async def test_api_5_exchange_inequivalence_and_reserved_names(api):
    await api.put("/api/exchanges/%2F/x", {"type": "direct"})
    mismatch = await api.put("/api/exchanges/%2F/x", {"type": "topic"})
    assert mismatch.status == 400
    assert mismatch.body["reason"].startswith("inequivalent arg 'type' for exchange 'x'")
    reserved = await api.put("/api/exchanges/%2F/amq.custom", {"type": "direct"})
    assert reserved.status == 401
    assert reserved.body["reason"] == "exchange name 'amq.custom' contains reserved prefix 'amq.*'"
    default = await api.delete("/api/exchanges/%2F/amq.default")
    assert default.body == {
        "error": "not_authorized",
        "reason": "operation not permitted on the default exchange",
    }
    system = await api.delete("/api/exchanges/%2F/amq.direct")
    assert system.status == 401


async def test_api_5_delete_if_unused(api):
    await api.put("/api/exchanges/%2F/x", {"type": "fanout"})
    await api.put("/api/queues/%2F/q", {})
    await api.post("/api/bindings/%2F/e/x/q/q", {})
    refused = await api.delete("/api/exchanges/%2F/x?if-unused=true")
    assert (refused.status, refused.body["reason"]) == (400, "exchange 'x' in vhost '/' in use")
    assert (await api.delete("/api/exchanges/%2F/x")).status == 204


async def test_api_6_publish_errors(api, memory):
    body = {"properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"}
    missing = await api.post("/api/exchanges/%2F/nope/publish", body)
    # RabbitMQ 3.10.8 answers 400 with the channel error (tests/sidebyside/test_http_publish_errors.py)
    assert (missing.status, missing.body["reason"]) == (
        400,
        "404 NOT_FOUND - no exchange 'nope' in vhost '/'",
    )
    await api.put("/api/exchanges/%2F/hidden", {"type": "direct", "internal": True})
    internal = await api.post("/api/exchanges/%2F/hidden/publish", body)
    assert internal.status == 401
    unrouted = await api.post("/api/exchanges/%2F/amq.default/publish", body)
    assert (unrouted.status, unrouted.body) == (200, {"routed": False})
    bad = await api.post("/api/exchanges/%2F/amq.default/publish", {**body, "payload": None})
    assert (bad.status, bad.body["reason"]) == (400, "[{key_missing,payload}]")


async def test_api_7_queue_lifecycle(api, broker):
    created = await api.put(
        "/api/queues/%2F/q", {"durable": True, "arguments": {"x-max-length": 2}}
    )
    assert created.status == 201
    assert (await api.put("/api/queues/%2F/q", {"arguments": {"x-max-length": 2}})).status == 204
    queue = broker.vhosts["/"].queues["q"]
    assert (queue.durable, queue.settings.max_length) == (True, 2)
    assert (await api.delete("/api/queues/%2F/q")).status == 204
    assert "q" not in broker.vhosts["/"].queues
    assert (await api.delete("/api/queues/%2F/q")).status == 404
    assert (await api.get("/api/queues/nowhere")).status == 404


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (
            {"x-max-length": -1},
            "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}",
        ),
        ({"x-overflow": "explode"}, None),
        (
            {"x-max-priority": 256},
            "invalid arg 'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,256}",
        ),
    ],
)
async def test_api_7_bad_queue_arguments_change_nothing(api, broker, arguments, reason):
    reply = await api.put("/api/queues/%2F/q", {"arguments": arguments})
    assert reply.status == 400
    if reason is not None:
        assert reply.body["reason"] == reason
    assert "q" not in broker.vhosts["/"].queues


async def test_api_7_delete_if_empty_and_if_unused(api, broker):
    await api.put("/api/queues/%2F/q", {})
    await api.post(
        "/api/exchanges/%2F/amq.default/publish",
        {"properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"},
    )
    refused = await api.delete("/api/queues/%2F/q?if-empty=true")
    assert (refused.status, refused.body) == (
        400,
        {"error": "bad_request", "reason": "queue 'q' in vhost '/' is not empty"},
    )
    assert (await api.delete("/api/queues/%2F/q?if-unused=true")).status == 204


async def test_api_8_purge(api, broker):
    await api.put("/api/queues/%2F/q", {})
    for _ in range(3):
        await api.post(
            "/api/exchanges/%2F/amq.default/publish",
            {"properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"},
        )
    assert broker.vhosts["/"].queues["q"].ready_count == 3
    assert (await api.delete("/api/queues/%2F/q/contents")).status == 204
    assert broker.vhosts["/"].queues["q"].ready_count == 0
    assert (await api.delete("/api/queues/%2F/missing/contents")).status == 404


async def test_api_8_bad_get_changes_nothing(api, broker):
    await api.put("/api/queues/%2F/q", {})
    await api.post(
        "/api/exchanges/%2F/amq.default/publish",
        {"properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"},
    )
    bad = await api.post(
        "/api/queues/%2F/q/get", {"count": 1, "ackmode": "nope", "encoding": "auto"}
    )
    assert bad.status == 400
    assert broker.vhosts["/"].queues["q"].ready_count == 1
    got = await api.post(
        "/api/queues/%2F/q/get", {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}
    )
    assert [m["payload"] for m in got.body] == ["x"]
    assert broker.vhosts["/"].queues["q"].ready_count == 0


async def test_api_10_binding_lifecycle_with_location(api, broker):
    await api.put("/api/exchanges/%2F/x", {"type": "topic"})
    await api.put("/api/queues/%2F/q", {})
    created = await api.post(
        "/api/bindings/%2F/e/x/q/q", {"routing_key": "a.*", "arguments": {"k": 1}}
    )
    assert created.status == 201
    location = created.headers["Location"]
    assert location.startswith("/api/bindings/%2F/e/x/q/q/a.%2A~")
    key = location.rsplit("/", 1)[1]
    (listed,) = (await api.get("/api/bindings/%2F/e/x/q/q")).body
    assert listed["properties_key"] == key
    assert (
        await api.post("/api/bindings/%2F/e/x/q/q", {"routing_key": "a.*", "arguments": {"k": 1}})
    ).status == 201
    assert len(broker.vhosts["/"].bindings()) == 1
    assert (await api.get(location)).body == listed
    # A client that decoded the key once more still finds the binding.
    assert (await api.get("/api/bindings/%2F/e/x/q/q/a.%252A~" + key.split("~")[1])).status == 200
    assert (await api.delete(location)).status == 204
    assert broker.vhosts["/"].bindings() == []
    assert (await api.delete(location)).status == 404


async def test_api_10_exchange_to_exchange_and_errors(api, broker):
    await api.put("/api/exchanges/%2F/src", {"type": "fanout"})
    await api.put("/api/exchanges/%2F/dst", {"type": "fanout"})
    created = await api.post("/api/bindings/%2F/e/src/e/dst", {})
    assert created.headers["Location"].endswith("/api/bindings/%2F/e/src/e/dst/~")
    dest = await api.get("/api/exchanges/%2F/dst/bindings/destination")
    assert [item["source"] for item in dest.body] == ["src"]
    assert (await api.post("/api/bindings/%2F/e/nope/e/dst", {})).status == 404
    assert (await api.post("/api/bindings/%2F/e/src/q/nope", {})).status == 404
    await api.put("/api/queues/%2F/q", {})
    default = await api.post("/api/bindings/%2F/e/amq.default/q/q", {})
    assert default.status == 401
    implicit = await api.get("/api/bindings/%2F/e/amq.default/q/q")
    assert [item["routing_key"] for item in implicit.body] == ["q"]
    headers_bad = await api.put("/api/exchanges/%2F/h", {"type": "headers"})
    assert headers_bad.status == 201
    bad = await api.post("/api/bindings/%2F/e/h/q/q", {"arguments": {"x-match": "foo"}})
    assert bad.status == 400
    assert bad.body["reason"].startswith("Invalid x-match field value")
    assert len(broker.vhosts["/"].exchanges["h"].bindings) == 0


async def test_unknown_routes_and_methods(api):
    assert (await api.get("/api/nothing/here")).body == {
        "error": "Object Not Found",
        "reason": "Not Found",
    }
    patched = await api.call("PATCH", "/api/queues/%2F/q", {})
    assert patched.status == 405
    assert patched.body["error"] == "Method Not Allowed"
    assert "PUT" in patched.headers["Allow"]


async def test_bad_json_is_bad_request(api, broker):
    reply = await api.call("PUT", "/api/queues/%2F/q", raw=b"{nope")
    assert (reply.status, reply.body) == (400, {"error": "bad_request", "reason": "not_json"})
    assert "q" not in broker.vhosts["/"].queues


async def test_cross_vhost_lists(api, broker):
    await api.put("/api/vhosts/v2", {})
    await api.put("/api/queues/v2/q", {})
    await api.put("/api/exchanges/v2/x", {"type": "fanout"})
    await api.post("/api/bindings/v2/e/x/q/q", {})
    queues = await api.get("/api/queues")
    assert [(q["vhost"], q["name"]) for q in queues.body] == [("v2", "q")]
    exchanges = await api.get("/api/exchanges?columns=vhost,name")
    assert {"vhost": "v2", "name": "x"} in exchanges.body
    assert len(exchanges.body) == 15  # 7 predeclared per vhost, plus x
    bindings = await api.get("/api/bindings")
    assert [(b["vhost"], b["source"]) for b in bindings.body] == [("v2", ""), ("v2", "x")]
    assert (await api.get("/api/extensions")).body == []
