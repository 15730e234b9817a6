"""Issue "Broker trust", items 8 and 12 over HTTP: bad input is refused before anything changes.

Every refusal asserts the status, RabbitMQ's reason text and, by comparing the export (plus the
queue depths, which the export leaves out) before and after, that nothing changed.
"""

import json
from typing import Any

import pytest
from hutch_broker.model.broker import Broker

LONG = "a" * 256  # one byte over a shortstr
LONG_UTF8 = "é" * 128  # 256 bytes in 128 characters
PUBLISH = "/api/exchanges/%2F/amq.default/publish"


def state(broker: Broker) -> tuple[dict[str, Any], dict[str, int]]:
    depths = {
        f"{vhost.name}/{queue.name}": queue.ready_count
        for vhost in broker.vhosts.values()
        for queue in vhost.queues.values()
    }
    return broker.export_definitions(), depths


def too_long(kind: str, size: int = 256) -> str:
    return f"{kind} should be less than 255 bytes, actually was {size}\n"


def publish_body(**overrides: Any) -> dict[str, Any]:
    body = {"properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"}
    body.update(overrides)
    return body


# -- item 8: names over 255 bytes --------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "kind"),
    [
        ("PUT", f"/api/queues/%2F/{LONG}", {}, "queue"),
        ("PUT", "/api/queues/%2F/" + "%C3%A9" * 128, {}, "queue"),
        ("PUT", f"/api/exchanges/%2F/{LONG}", {"type": "direct"}, "exchange"),
        (
            "PUT",
            "/api/exchanges/%2F/x.new",
            {"type": "direct", "arguments": {"alternate-exchange": LONG}},
            "exchange",
        ),
        ("PUT", "/api/queues/%2F/q.new", {"arguments": {LONG: 1}}, "arguments key"),
        (
            "PUT",
            "/api/queues/%2F/q.new",
            {"arguments": {"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": LONG}},
            "routing_key",
        ),
        ("POST", "/api/bindings/%2F/e/x/q/q", {"routing_key": LONG}, "routing_key"),
        ("POST", "/api/bindings/%2F/e/x/q/q", {"routing_key": LONG_UTF8}, "routing_key"),
        (
            "POST",
            "/api/bindings/%2F/e/x/q/q",
            {"routing_key": "k", "arguments": {"x-match": "any", "n": {LONG: 1}}},
            "arguments key",
        ),
        ("POST", PUBLISH, publish_body(routing_key=LONG), "routing_key"),
        (
            "POST",
            PUBLISH,
            publish_body(properties={"headers": {"h": [{LONG: 1}]}}),
            "headers key",
        ),
        ("PUT", f"/api/policies/%2F/{LONG}", {"pattern": "q", "definition": {}}, "policy"),
        (
            "PUT",
            "/api/policies/%2F/pol",
            {"pattern": "q", "definition": {"dead-letter-exchange": LONG}},
            "exchange",
        ),
        (
            "PUT",
            f"/api/operator-policies/%2F/{LONG}",
            {"pattern": "q", "definition": {"max-length": 1}},
            "policy",
        ),
    ],
)
async def test_item_8_names_over_255_bytes_are_refused(api, broker, method, path, body, kind):
    assert (await api.put("/api/queues/%2F/q", {})).status == 201
    assert (await api.put("/api/exchanges/%2F/x", {"type": "headers"})).status == 201
    before = state(broker)
    reply = await api.call(method, path, body)
    assert (reply.status, reply.body) == (400, {"error": "bad_request", "reason": too_long(kind)})
    assert state(broker) == before


async def test_item_8_names_of_255_bytes_are_accepted(api, broker):
    name = "é" * 127 + "a"  # 255 bytes
    assert (await api.put(f"/api/queues/%2F/{name}", {})).status == 201
    reply = await api.post(PUBLISH, publish_body(routing_key=name))
    assert (reply.status, reply.body) == (200, {"routed": True})
    assert broker.vhosts["/"].queues[name].ready_count == 1


async def test_item_8_definitions_import_refuses_long_names_and_changes_nothing(api, broker):
    before = state(broker)
    document = {
        "vhosts": [{"name": "new-vh"}],
        "exchanges": [{"name": "x", "vhost": "new-vh", "type": "direct"}],
        "queues": [{"name": "q", "vhost": "new-vh"}],
        "bindings": [{"source": "x", "vhost": "new-vh", "destination": "q", "routing_key": LONG}],
    }
    reply = await api.post("/api/definitions", document)
    assert (reply.status, reply.body["reason"]) == (400, too_long("routing_key"))
    assert state(broker) == before


# -- item 12 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["café", "q!", "a b", "q/x"])
async def test_item_12_punctuated_and_non_ascii_queue_names_work(api, broker, name):
    from urllib.parse import quote

    path = f"/api/queues/%2F/{quote(name, safe='')}"
    assert (await api.put(path, {})).status == 201
    assert (await api.get(path)).body["name"] == name
    reply = await api.post(PUBLISH, publish_body(routing_key=name))
    assert reply.body == {"routed": True}
    got = await api.post(
        path + "/get", {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}
    )
    assert [message["routing_key"] for message in got.body] == [name]


async def test_item_12_deleting_an_auto_delete_exchange_with_a_binding(api, broker):
    assert (await api.put("/api/queues/%2F/q", {})).status == 201
    body = {"type": "direct", "auto_delete": True}
    assert (await api.put("/api/exchanges/%2F/ad", body)).status == 201
    assert (await api.post("/api/bindings/%2F/e/ad/q/q", {"routing_key": "k"})).status == 201
    reply = await api.delete("/api/exchanges/%2F/ad")
    assert (reply.status, reply.body) == (204, None)
    vhost = broker.vhosts["/"]
    assert "ad" not in vhost.exchanges
    assert vhost.queues["q"].incoming == {}


@pytest.mark.parametrize(
    "raw",
    [
        b'{"durable": NaN}',
        b'{"arguments": {"x-max-length": Infinity}}',
        b'{"arguments": {"x-max-length": -Infinity}}',
        b'{"arguments": {"x-max-length": 1e400}}',
        b'{"arguments": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        b'{"arguments": {"a": ' + b'{"b":' * 65 + b"1" + b"}" * 65 + b"}}",
    ],
    ids=["nan", "infinity", "minus-infinity", "beyond-double", "very-deep", "just-too-deep"],
)
async def test_item_12_bad_json_is_refused(api, broker, raw):
    before = state(broker)
    reply = await api.call("PUT", "/api/queues/%2F/q", raw=raw)
    assert (reply.status, reply.body) == (400, {"error": "bad_request", "reason": "not_json"})
    assert state(broker) == before


async def test_item_12_nesting_up_to_the_limit_is_accepted(api, broker):
    raw = b'{"arguments": {"a": ' + b'{"b":' * 62 + b"1" + b"}" * 62 + b"}}"
    assert json.loads(raw)
    assert (await api.call("PUT", "/api/queues/%2F/q", raw=raw)).status == 201


@pytest.mark.parametrize("timestamp", [2**64, -1, True, 1.5])
async def test_item_12_publish_with_a_bad_timestamp_is_refused(api, broker, timestamp):
    assert (await api.put("/api/queues/%2F/q", {})).status == 201
    before = state(broker)
    reply = await api.post(PUBLISH, publish_body(properties={"timestamp": timestamp}))
    assert reply.status == 400
    assert reply.body["reason"] == f"invalid property 'timestamp': {timestamp!r}"
    assert state(broker) == before


async def test_item_12_publish_with_a_300_byte_key_routes_nothing(api, broker):
    assert (await api.put("/api/queues/%2F/q", {})).status == 201
    assert (await api.post("/api/bindings/%2F/e/amq.fanout/q/q", {})).status == 201
    before = state(broker)
    body = publish_body(routing_key="k" * 300)
    reply = await api.post("/api/exchanges/%2F/amq.fanout/publish", body)
    assert (reply.status, reply.body["reason"]) == (400, too_long("routing_key", 300))
    assert state(broker) == before


async def test_item_12_header_keys_up_to_255_bytes_are_carried_whole(api, broker):
    assert (await api.put("/api/queues/%2F/q", {})).status == 201
    key = "k" * 255
    properties = {"headers": {key: 1, "n": {"k" * 200: "v"}}}
    assert (await api.post(PUBLISH, publish_body(properties=properties))).status == 200
    got = await api.post(
        "/api/queues/%2F/q/get", {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}
    )
    assert got.body[0]["properties"]["headers"] == properties["headers"]


async def test_item_12_failed_import_is_all_or_nothing(api, broker):
    """An exclusive queue is not in the export: a rehearsal without it passed, then the real
    import created a vhost, a user, a permission and an exchange before it failed."""
    owner = object()
    broker.vhosts["/"].declare_queue("excl", exclusive_owner=owner)
    before = state(broker)
    document = {
        "vhosts": [{"name": "new-vh"}],
        "users": [{"name": "admin2", "password_hash": "", "tags": ["administrator"]}],
        "permissions": [
            {"user": "admin2", "vhost": "new-vh", "configure": ".*", "write": ".*", "read": ".*"}
        ],
        "exchanges": [{"name": "new.x", "vhost": "/", "type": "direct"}],
        "queues": [{"name": "excl", "vhost": "/", "durable": False}],
    }
    reply = await api.post("/api/definitions", document)
    assert reply.status == 400
    assert reply.body["reason"].startswith("cannot obtain exclusive access to locked queue 'excl'")
    assert state(broker) == before
    assert "admin2" not in broker.users


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ({"queues": [{"name": {"a": 1}, "vhost": "/"}]}, "queues: 'name' must be a string"),
        ({"queues": [{"vhost": "/"}]}, "queues: missing key 'name'"),
        ({"exchanges": [{"name": "x", "vhost": "/", "arguments": []}]}, None),
        ({"users": [{"name": "u"}]}, "users: missing key 'password_hash'"),
        ({"vhosts": [{"name": "v"}], "queues": 5}, "'queues' must be a list of objects"),
    ],
)
async def test_item_12_import_checks_shapes_first(api, broker, document, reason):
    before = state(broker)
    reply = await api.post("/api/definitions", document)
    assert reply.status == 400
    assert reply.body["reason"] == (reason or "exchanges: 'arguments' must be an object")
    assert state(broker) == before


async def test_item_12_import_with_a_server_named_queue_present(api, broker):
    """The scratch copy must hold ``amq.gen-*`` queues, which the importer itself refuses."""
    queue, _ = broker.vhosts["/"].declare_queue("", durable=True)
    document = {"queues": [{"name": "plain", "vhost": "/", "durable": True}]}
    assert (await api.post("/api/definitions", document)).status == 204
    assert {queue.name, "plain"} <= set(broker.vhosts["/"].queues)


async def test_item_12_messages_paged_out_is_reported(api, broker, tmp_path):
    from hutch_broker.model import paging
    from hutch_broker.model.messages import Message
    from hutch_broker.protocol import properties
    from hutch_broker.store import MessageStore

    broker.pager.store = MessageStore(tmp_path / "paging")
    queue, _ = broker.vhosts["/"].declare_queue("q")
    raw = properties.encode_properties()
    total = paging.KEEP_IN_MEMORY + 10
    for n in range(total):
        queue.publish(Message("", "q", raw, b"%04d" % n), 0)
    broker.set_paging(True)
    item = (await api.get("/api/queues/%2F/q")).body
    assert item["messages_paged_out"] == 10
    assert item["message_bytes_paged_out"] == 40
    assert item["messages_ready_ram"] == paging.KEEP_IN_MEMORY
    assert item["messages"] == total
    broker.pager.store.close()


@pytest.mark.parametrize(
    ("method", "path", "raw"),
    [
        (
            "POST",
            PUBLISH,
            b'{"properties":{},"routing_key":"q","payload":"\\ud800","payload_encoding":"string"}',
        ),
        (
            "POST",
            "/api/exchanges/%2F/x/publish",
            b'{"properties":{},"routing_key":"\\ud800","payload":"x","payload_encoding":"string"}',
        ),
        ("POST", "/api/bindings/%2F/e/x/q/q", b'{"routing_key":"\\udc80"}'),
        ("POST", "/api/definitions", b'{"queues":[{"name":"\\udc80x","vhost":"/"}]}'),
        ("PUT", "/api/users/u", b'{"password":"\\ud800","tags":""}'),
    ],
    ids=["payload", "publish-routing-key", "binding-key", "definitions", "password"],
)
async def test_fuzz_lone_surrogates_are_not_json(api, broker, method, path, raw):
    """Found by the management fuzzer: JSON's "\\ud800" is no UTF-8 string; it answered 500 or,
    as a routing key or name, made messages no frame could carry."""
    assert (await api.put("/api/queues/%2F/q", {})).status == 201
    assert (await api.put("/api/exchanges/%2F/x", {"type": "fanout"})).status == 201
    assert (await api.post("/api/bindings/%2F/e/x/q/q", {})).status == 201
    before = state(broker)
    reply = await api.call(method, path, raw=raw)
    assert (reply.status, reply.body) == (400, {"error": "bad_request", "reason": "not_json"})
    assert state(broker) == before


async def test_fuzz_surrogate_pairs_are_fine(api, broker):
    assert (await api.put("/api/queues/%2F/q%F0%9F%98%80", {})).status == 201
    raw = b'{"properties":{},"routing_key":"q\\ud83d\\ude00","payload":"x","payload_encoding":"string"}'
    reply = await api.call("POST", PUBLISH, raw=raw)
    assert (reply.status, reply.body) == (200, {"routed": True})
    assert broker.vhosts["/"].queues["q\U0001f600"].ready_count == 1
