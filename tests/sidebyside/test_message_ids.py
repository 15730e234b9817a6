"""A message without a ``message_id`` is delivered without one, side by side with RabbitMQ 3.10.8.

Why: a broker delivers what was published. hutch-broker used to stamp ``hutch-<boot>-<n>`` on
every publish that carried no id, so a consumer saw a property its publisher never set (issue 30,
item 7). Stamping is now an opt-in (``stamp_message_id = true``, tested in
tests/broker/amqp/test_basic.py); by default both brokers hand back the publisher's properties
unchanged, whichever way the message came in: AMQP, the management API's publish, or a direct
reply-to reply.
"""

import time

import pika
import pytest
from hutch_demo.management import quote
from hutch_demo.waiting import wait_for
from hutch_testing.steps import ACK, get, publish, ready

pytestmark = pytest.mark.rabbitmq

FIELDS = (
    "content_type",
    "content_encoding",
    "headers",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
    "cluster_id",
)


def _shown(properties: pika.BasicProperties) -> dict:
    """The properties a consumer sees, unset ones left out."""
    return {name: getattr(properties, name) for name in FIELDS if getattr(properties, name)}


def _consume(target, queue: str, count: int) -> list[tuple[dict, bytes, bool]]:
    """``count`` deliveries to a consumer (acked): (properties, body, redelivered)."""
    channel = target.connection.channel()
    got: list[tuple[dict, bytes, bool]] = []
    channel.basic_consume(
        queue,
        lambda _ch, method, props, body: got.append((_shown(props), body, method.redelivered)),
    )
    deadline = time.monotonic() + 10
    while len(got) < count and time.monotonic() < deadline:
        target.connection.process_data_events(time_limit=0.05)
    channel.close()
    return got


def test_an_amqp_publish_without_a_message_id_is_delivered_without_one(target):
    ch = target.channel()
    q = target.name("q")
    ch.queue_declare(q)
    assert publish(ch, q, "bare") == ACK
    assert publish(ch, q, "typed", content_type="text/plain", headers={"h": 1}) == ACK
    assert publish(ch, q, "own", message_id="mine") == ACK

    first = _consume(target, q, 3)  # unacked at the channel's close: delivered again below
    # RabbitMQ requeues a closed channel's unacked messages in the queue's own process, after
    # channel.close-ok: wait until all three are ready again before taking them.
    wait_for(lambda: ready(ch, q) == 3, timeout=10)
    again = [get(ch, q) for _ in range(3)]

    assert [(props, body) for props, body, _ in first] == [
        ({}, b"bare"),
        ({"content_type": "text/plain", "headers": {"h": 1}}, b"typed"),
        ({"message_id": "mine"}, b"own"),
    ]
    # Redeliveries carry what was published, nothing added since.
    assert [(_shown(got[1]), got[0].redelivered) for got in again if got] == [
        ({}, True),
        ({"content_type": "text/plain", "headers": {"h": 1}}, True),
        ({"message_id": "mine"}, True),
    ]
    assert publish(ch, q, "bare") == ACK
    shown = target.api.post(
        f"/queues/%2F/{quote(q)}/get",
        {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"},
    ).body
    assert shown[0]["properties"] == []  # RabbitMQ's empty proplist: no message_id either


def test_an_http_publish_without_a_message_id_is_delivered_without_one(target):
    ch = target.channel()
    q = target.name("q")
    ch.queue_declare(q)
    for properties in ({}, {"content_type": "text/plain", "headers": {"h": "1"}}):
        response = target.api.post(
            "/exchanges/%2F/amq.default/publish",
            {
                "properties": properties,
                "routing_key": q,
                "payload": "x",
                "payload_encoding": "string",
            },
        )
        assert response.body == {"routed": True}

    got = [get(ch, q) for _ in range(2)]

    assert [_shown(item[1]) for item in got if item] == [
        {},
        {"content_type": "text/plain", "headers": {"h": "1"}},
    ]


def test_a_direct_reply_without_a_message_id_arrives_without_one(target):
    server = target.channel()
    q = target.name("rpc")
    server.queue_declare(q)
    requester = target.connect()
    channel = requester.channel()
    replies: list[dict] = []
    channel.basic_consume(
        "amq.rabbitmq.reply-to",
        lambda _ch, _method, props, _body: replies.append(_shown(props)),
        auto_ack=True,
    )
    channel.basic_publish(
        "",
        q,
        b"ask",
        pika.BasicProperties(
            reply_to="amq.rabbitmq.reply-to", correlation_id="c1", message_id="request-1"
        ),
    )
    deadline = time.monotonic() + 10
    request = None
    while request is None and time.monotonic() < deadline:
        requester.process_data_events(time_limit=0.05)
        request = get(server, q)
    assert request is not None, "no request arrived"
    assert request[1].message_id == "request-1"

    # The reply carries no message_id: the reply-to path delivers it as published too.
    assert publish(server, request[1].reply_to, "answer", correlation_id="c1") == ACK
    while not replies and time.monotonic() < deadline:
        requester.process_data_events(time_limit=0.05)

    assert replies == [{"correlation_id": "c1"}]
