"""HTTP publish and get as pure operations on an in-memory vhost (API-6, API-8)."""

import base64

import pytest
from hutch_broker.admin import errors, messaging
from hutch_broker.model import budgets
from hutch_broker.protocol import properties

NOW = 1_000_000


def publish_body(**overrides):
    body = {
        "properties": {"delivery_mode": 2, "headers": {"h": 1}},
        "routing_key": "q",
        "payload": "hello",
        "payload_encoding": "string",
    }
    body.update(overrides)
    return body


@pytest.fixture
def vhost(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_queue("q", source="http")
    return vhost


def test_api_6_publish_routes_through_the_default_exchange(vhost):
    request = messaging.parse_publish(publish_body())
    assert messaging.publish(
        vhost, vhost.exchanges[""], request, NOW, meter=budgets.unlimited()
    ).routed
    (entry,) = vhost.queues["q"].ready_entries()
    assert entry.message.body == b"hello"
    assert properties.decode_properties(entry.message.raw_properties) == {
        "headers": {"h": 1},
        "delivery_mode": 2,
    }


def test_api_6_unroutable_publish(vhost):
    request = messaging.parse_publish(publish_body(routing_key="nowhere"))
    published = messaging.publish(
        vhost, vhost.exchanges[""], request, NOW, meter=budgets.unlimited()
    )
    assert not published.routed
    assert not published.wrote


def test_api_6_base64_payload_and_all_properties(vhost):
    request = messaging.parse_publish(
        publish_body(
            payload=base64.b64encode(b"\x00\xff").decode(),
            payload_encoding="base64",
            properties={
                "content_type": "application/octet-stream",
                "type": "kind",
                "timestamp": 1700000000,
                "priority": 3,
                "expiration": "60000",
                "message_id": "m1",
            },
        )
    )
    assert request.body == b"\x00\xff"
    decoded = messaging.properties_json(request.raw_properties)
    assert decoded == {
        "content_type": "application/octet-stream",
        "type": "kind",
        "timestamp": 1700000000,
        "priority": 3,
        "expiration": "60000",
        "message_id": "m1",
    }


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"routing_key": None}, "[{key_missing,routing_key}]"),
        ({"payload_encoding": "rot13"}, "unknown payload_encoding 'rot13'"),
        ({"payload_encoding": "base64", "payload": "!!"}, "payload is not valid base64"),
        ({"properties": {"colour": "red"}}, "invalid property 'colour'"),
        ({"properties": {"delivery_mode": 3}}, "invalid property 'delivery_mode': 3"),
        ({"properties": {"expiration": "-1"}}, "invalid expiration '-1': {value_negative,-1}"),
        ({"properties": {"expiration": "foo"}}, "invalid expiration 'foo': no_integer"),
        ({"properties": {"priority": 300}}, None),
        ({"properties": {"headers": []}}, "invalid property 'headers': must be an object"),
    ],
)
def test_api_6_bad_publish_bodies(overrides, reason):
    with pytest.raises(errors.ApiError) as caught:
        messaging.parse_publish(publish_body(**overrides))
    assert caught.value.status == 400
    if reason is not None:
        assert caught.value.body["reason"] == reason


def _fill(vhost, *bodies):
    for body in bodies:
        request = messaging.parse_publish(publish_body(payload=body))
        messaging.publish(vhost, vhost.exchanges[""], request, NOW, meter=budgets.unlimited())


def get(vhost, **body):
    request = messaging.parse_get({"count": 1, "encoding": "auto", **body})
    return messaging.get(vhost.queues["q"], request, NOW)


def test_api_8_get_with_requeue_keeps_messages_in_order(vhost):
    _fill(vhost, "a", "b", "c")
    first = get(vhost, count=2, ackmode="ack_requeue_true")
    assert [(m["payload"], m["redelivered"], m["message_count"]) for m in first] == [
        ("a", False, 2),
        ("b", False, 1),
    ]
    again = get(vhost, count=5, ackmode="ack_requeue_true")
    assert [(m["payload"], m["redelivered"]) for m in again] == [
        ("a", True),
        ("b", True),
        ("c", False),
    ]
    assert vhost.queues["q"].ready_count == 3
    assert vhost.queues["q"].unacked_count == 0


def test_api_8_get_without_requeue_removes(vhost):
    _fill(vhost, "a", "b")
    assert [m["payload"] for m in get(vhost, ackmode="ack_requeue_false")] == ["a"]
    assert [m["payload"] for m in get(vhost, ackmode="reject_requeue_false")] == ["b"]
    assert get(vhost, ackmode="ack_requeue_false") == []
    assert vhost.queues["q"].ready_count == vhost.queues["q"].unacked_count == 0


def test_api_8_get_item_matches_reference(vhost, reference):
    _fill(vhost, "hello")
    (item,) = get(vhost, ackmode="ack_requeue_true")
    (expected,) = reference("POST_queues__2F_mgmt.q_get.json")
    assert list(item) == list(expected)
    assert item == {**expected, "routing_key": "q"}


def test_api_8_binary_payloads_and_truncate(vhost):
    request = messaging.parse_publish(
        publish_body(payload=base64.b64encode(b"\xff\xfe abc").decode(), payload_encoding="base64")
    )
    messaging.publish(vhost, vhost.exchanges[""], request, NOW, meter=budgets.unlimited())
    (item,) = get(vhost, ackmode="ack_requeue_true")
    assert item["payload_encoding"] == "base64"
    assert base64.b64decode(item["payload"]) == b"\xff\xfe abc"
    (item,) = get(vhost, ackmode="ack_requeue_true", encoding="base64", truncate=2)
    assert base64.b64decode(item["payload"]) == b"\xff\xfe"
    assert item["payload_bytes"] == 6


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"count": 1, "ackmode": "ack", "encoding": "auto"}, "Unsupported ackmode 'ack'"),
        ({"count": 1, "ackmode": "ack_requeue_true", "encoding": "hex"}, None),
        ({"ackmode": "ack_requeue_true", "encoding": "auto"}, "[{key_missing,count}]"),
        ({"count": 0, "ackmode": "ack_requeue_true", "encoding": "auto"}, None),
    ],
)
def test_api_8_bad_get_bodies(body, reason):
    with pytest.raises(errors.ApiError) as caught:
        messaging.parse_get(body)
    if reason is not None:
        assert caught.value.body["reason"] == reason


def test_api_9_aliveness_leaves_an_empty_queue(broker):
    vhost = broker.vhosts["/"]
    assert messaging.aliveness(vhost, NOW) is True
    assert messaging.aliveness(vhost, NOW) is True
    assert vhost.queues["aliveness-test"].ready_count == 0
