"""Direct reply-to (`amq.rabbitmq.reply-to`) side by side with RabbitMQ 3.10.8 (issue 14).

RPC without a reply queue: the requester consumes from the pseudo-queue with no-ack, publishes
with `reply_to` set to it, and the server's reply to the rewritten address comes straight back
to the requester's channel. The misuses RabbitMQ refuses, it refuses with the same texts.
"""

import time

import pika
import pytest
from hutch_testing.steps import ACK, RETURNED, closed_by_broker, get, publish

pytestmark = pytest.mark.rabbitmq

PSEUDO = "amq.rabbitmq.reply-to"


class Requester:
    """A channel consuming its replies from the pseudo-queue."""

    def __init__(self, target):
        self.connection = target.connect()
        self.channel = self.connection.channel()
        self.replies = []
        self.tag = self.channel.basic_consume(PSEUDO, self._on_reply, auto_ack=True)

    def _on_reply(self, _ch, method, props, body):
        self.replies.append((method, props, body))

    def request(self, queue, body, **props):
        props = pika.BasicProperties(reply_to=PSEUDO, **props)
        self.channel.basic_publish("", queue, body.encode(), props)

    def wait(self, count, settle=0.2):
        deadline = time.monotonic() + 10
        while len(self.replies) < count and time.monotonic() < deadline:
            self.connection.process_data_events(time_limit=0.05)
        self.connection.process_data_events(time_limit=settle)
        return self.replies


def _serve_one(channel, queue):
    """The server side: take one request and answer it at its reply_to address."""
    for _ in range(100):
        got = get(channel, queue)
        if got is not None:
            break
        time.sleep(0.02)
    assert got is not None, "no request arrived"
    _, props, body = got
    outcome = publish(channel, props.reply_to, b"re:" + body, correlation_id=props.correlation_id)
    return props.reply_to, outcome


def test_a_request_gets_its_reply_on_the_requesters_channel(target):
    server = target.channel()
    q = target.name("rpc")
    server.queue_declare(q)
    requester = Requester(target)
    requester.request(q, "one", correlation_id="c1")
    requester.request(q, "two", correlation_id="c2")
    first = _serve_one(server, q)
    second = _serve_one(server, q)

    assert first[0].startswith(PSEUDO + ".") and first[0] == second[0]
    assert (first[1], second[1]) == (ACK, ACK)
    replies = [
        (
            m.consumer_tag,
            m.delivery_tag,
            m.redelivered,
            m.exchange,
            m.routing_key,
            p.correlation_id,
            b,
        )
        for m, p, b in requester.wait(2)
    ]
    # The tag is the channel's next one, never used up: both replies carry 1 (as 3.10.8 does).
    assert replies == [
        (requester.tag, 1, False, "", first[0], "c1", b"re:one"),
        (requester.tag, 1, False, "", first[0], "c2", b"re:two"),
    ]


def test_a_reply_published_over_http_reaches_the_requester_reported_unrouted(target):
    server = target.channel()
    q = target.name("rpc")
    server.queue_declare(q)
    requester = Requester(target)
    requester.request(q, "one")
    requester.wait(0, settle=0.1)
    reply_to = get(server, q)[1].reply_to
    body = {"properties": {}, "routing_key": reply_to, "payload": "re:one"}
    response = target.api.post(
        "/exchanges/%2F/amq.default/publish", {**body, "payload_encoding": "string"}
    )

    assert (response.status, response.body) == (200, {"routed": False})
    assert [b for _, _, b in requester.wait(1)] == [b"re:one"]


def test_consuming_the_pseudo_queue_with_acks_is_refused(target):
    ch = target.channel()
    outcome = closed_by_broker(lambda: ch.basic_consume(PSEUDO, lambda *_: None, auto_ack=False))
    assert outcome == (406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")


def test_a_second_reply_consumer_on_one_channel_is_refused(target):
    ch = target.channel()
    ch.basic_consume(PSEUDO, lambda *_: None, auto_ack=True)
    outcome = closed_by_broker(lambda: ch.basic_consume(PSEUDO, lambda *_: None, auto_ack=True))
    assert outcome == (406, "PRECONDITION_FAILED - reply consumer already set")


def test_publishing_with_reply_to_before_consuming_is_refused(target):
    server = target.channel()
    q = target.name("rpc")
    server.queue_declare(q)
    ch = target.channel()
    outcome = closed_by_broker(lambda: publish(ch, q, "req", reply_to=PSEUDO))
    assert outcome == (406, "PRECONDITION_FAILED - fast reply consumer does not exist")
    assert server.queue_declare(q, passive=True).method.message_count == 0


def test_a_reply_to_a_closed_channel_or_an_unknown_address_is_dropped(target):
    server = target.channel()
    q = target.name("rpc")
    server.queue_declare(q)
    requester = Requester(target)
    requester.request(q, "one")
    requester.wait(0, settle=0.1)
    reply_to = get(server, q)[1].reply_to
    # The broker closes the requester's channel (pika would cancel the consumer first on a
    # client-side close, which test_a_cancelled_reply_consumer_gets_no_more_replies covers).
    missing = target.name("missing")
    closed_by_broker(lambda: requester.channel.queue_declare(missing, passive=True))

    outcomes = [
        publish(server, reply_to, "late", mandatory=True),
        publish(server, reply_to, "late"),
        publish(server, PSEUDO + ".nonsense", "x", mandatory=True),
    ]
    assert outcomes == [RETURNED, ACK, RETURNED]
    assert server.is_open
    gone = closed_by_broker(lambda: server.queue_declare(reply_to, passive=True))
    assert gone == (404, f"NOT_FOUND - no queue '{reply_to}' in vhost '/'")


def test_a_cancelled_reply_consumer_gets_no_more_replies(target):
    server = target.channel()
    q = target.name("rpc")
    server.queue_declare(q)
    requester = Requester(target)
    requester.request(q, "one")
    requester.wait(0, settle=0.1)
    reply_to = get(server, q)[1].reply_to
    requester.channel.basic_cancel(requester.tag)

    assert publish(server, reply_to, "late", mandatory=True) == RETURNED
    assert requester.wait(0) == []


def test_the_pseudo_queue_declares_but_is_no_queue(target):
    ch = target.channel()
    declared = ch.queue_declare(PSEUDO, passive=True).method
    assert (declared.queue, declared.message_count, declared.consumer_count) == (PSEUDO, 0, 1)
    fetch = closed_by_broker(lambda: ch.basic_get(PSEUDO))
    assert fetch == (404, f"NOT_FOUND - no queue '{PSEUDO}' in vhost '/'")
    ch = target.channel()
    bind = closed_by_broker(lambda: ch.queue_bind(PSEUDO, "amq.direct", "k"))
    assert bind == (404, f"NOT_FOUND - no queue '{PSEUDO}' in vhost '/'")


def test_connection_start_advertises_direct_reply_to(target):
    capabilities = target.connection._impl.server_properties["capabilities"]
    assert capabilities["direct_reply_to"] is True
