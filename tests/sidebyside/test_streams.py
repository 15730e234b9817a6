"""Stream queues over AMQP 0-9-1, side by side with RabbitMQ 3.10.8 (issue 28, ST-1..ST-6).

Every answer asserted here was first observed on the reference node (its ``stream_queue``
feature flag is on: a fresh 3.10.8 node enables every flag it supports): the declare rules and
their texts, the arguments refused and checked, the consume rules (prefetch required, no
auto-ack, ``x-stream-offset`` values), the ``x-stream-offset`` header on every delivery (a long,
in place of a publisher's own), credit returned by acks, what basic.get, queue.purge,
basic.nack and basic.reject answer, and the management item. Restarts and ``kill -9`` are tested on hutch-broker alone
(tests/broker/test_streams_durable.py): the reference node is shared by the whole session.
"""

import datetime
import struct

import pika
import pytest
from hutch_demo.waiting import wait_for
from hutch_testing import rawamqp
from hutch_testing.steps import closed_by_broker
from pamqp import commands, frame

pytestmark = pytest.mark.rabbitmq

STREAM = {"x-queue-type": "stream"}
TYPE_MODULE = "rabbit_stream_queue"
ERRORS = (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker)


def _declare(target, name, **kwargs):
    """queue.declare on a fresh connection: "ok", or what the broker closed with."""
    channel = target.connect().channel()
    try:
        channel.queue_declare(name, **kwargs)
    except ERRORS as closed:
        return type(closed).__name__, closed.reply_code, closed.reply_text
    return "ok"


def _stream(target, name="s", count=5):
    """A stream holding ``count`` messages m0.. (m2 with a header of its own), confirmed."""
    queue = target.name(name)
    assert _declare(target, queue, durable=True, arguments=STREAM) == "ok"
    channel = target.channel()
    for i in range(count):
        headers = {"h": i} if i == 2 else None
        channel.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(headers=headers))
    return queue


def _consume(target, queue, *, prefetch=10, wait=1.0, expect=0, **kwargs):
    """basic.consume on a fresh connection: (channel, deliveries so far, connection), or what
    the broker closed with.

    Events are processed for ``wait`` seconds (a delivery past what is expected shows up there),
    then on until at least ``expect`` deliveries arrived: a stream's reader sends them after
    consume-ok, on a loaded machine later than any fixed wait.
    """
    connection = target.connect()
    channel = connection.channel()
    if prefetch is not None:
        channel.basic_qos(prefetch_count=prefetch)
    got = []

    def on_message(_channel, method, properties, body):
        got.append((method.delivery_tag, method.redelivered, properties.headers, body))

    try:
        channel.basic_consume(queue, on_message, **kwargs)
        connection.process_data_events(wait)
        _process_until(connection, lambda: len(got) >= expect, f"{expect} deliveries")
    except ERRORS as closed:
        return type(closed).__name__, closed.reply_code, closed.reply_text
    return channel, got, connection


def _process_until(connection, condition, what):
    """Process the connection's events until ``condition()`` holds (bounded by ``wait_for``)."""
    wait_for(lambda: (connection.process_data_events(0.05), condition())[1], what=what)


def _offsets(got):
    return [headers["x-stream-offset"] for _, _, headers, _ in got]


def test_st_1_a_stream_is_durable_shared_and_client_named(target):
    name = target.name
    assert _declare(target, name("s"), durable=True, arguments=STREAM) == "ok"
    assert _declare(target, name("s"), durable=True, arguments=STREAM, passive=True) == "ok"

    def prop(suffix, what):
        return (
            "ChannelClosedByBroker",
            406,
            f"PRECONDITION_FAILED - invalid property '{what}' for queue '{name(suffix)}' in "
            "vhost '/'",
        )

    assert _declare(target, name("nd"), durable=False, arguments=STREAM) == prop(
        "nd", "non-durable"
    )
    assert _declare(target, name("ex"), durable=True, exclusive=True, arguments=STREAM) == prop(
        "ex", "exclusive-owner"
    )
    assert _declare(target, name("ad"), durable=True, auto_delete=True, arguments=STREAM) == prop(
        "ad", "auto-delete"
    )
    assert _declare(
        target, name("all"), durable=False, exclusive=True, auto_delete=True, arguments=STREAM
    ) == prop("all", "auto-delete")
    assert _declare(target, "", durable=True, arguments=STREAM) == (
        "ChannelClosedByBroker",
        406,
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_stream_queue",
    )
    http = target.api.put(f"/queues/%2F/{name('h')}", {"durable": False, "arguments": STREAM})
    assert (http.status, http.body) == (
        400,
        {
            "error": "bad_request",
            "reason": f"invalid property 'non-durable' for queue '{name('h')}' in vhost '/'",
        },
    )


REFUSED = [
    ("x-max-length", 3),
    ("x-max-priority", 3),
    ("x-message-ttl", 1000),
    ("x-dead-letter-exchange", "x"),
    ("x-overflow", "drop-head"),
    ("x-expires", 1000),
    ("x-single-active-consumer", True),
    ("x-queue-mode", "lazy"),
    ("x-delivery-limit", 3),
    ("x-dead-letter-routing-key", "k"),  # refused as another type's, not for a missing DLX
    ("x-queue-master-locator", "min-masters"),
    ("x-max-in-memory-length", 3),
    ("x-quorum-initial-group-size", 1),
]
INVALID = [
    ("x-max-length-bytes", -1, "{value_negative,-1}"),
    ("x-max-length-bytes", "a", '"expected integer, got longstr"'),
    ("x-stream-max-segment-size-bytes", -1, "{value_negative,-1}"),
    ("x-stream-max-segment-size-bytes", "a", '"expected integer, got longstr"'),
    ("x-max-age", 5, "{unacceptable_type,signedint}"),
    ("x-max-age", "0D", "invalid_max_age"),
]
ACCEPTED = [
    ("x-max-length-bytes", 100),
    ("x-stream-max-segment-size-bytes", 100),
    ("x-stream-max-segment-size-bytes", 0),
    ("x-initial-cluster-size", 1),
    ("x-queue-leader-locator", "balanced"),
    ("x-max-age", "1Y"),
    ("x-max-age", "1M"),
    ("x-max-age", "1D"),
    ("x-max-age", "1h"),
    ("x-max-age", "10m"),
    ("x-max-age", "1s"),
]


@pytest.mark.parametrize(("arg", "value"), REFUSED)
def test_st_1_other_queue_types_arguments_are_refused(target, arg, value):
    queue = target.name("a")
    assert _declare(target, queue, durable=True, arguments={**STREAM, arg: value}) == (
        "ChannelClosedByBroker",
        406,
        f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{queue}' in vhost '/' of queue "
        "type rabbit_stream_queue",
    )


@pytest.mark.parametrize(("arg", "value", "detail"), INVALID)
def test_st_1_stream_arguments_are_checked(target, arg, value, detail):
    queue = target.name("a")
    assert _declare(target, queue, durable=True, arguments={**STREAM, arg: value}) == (
        "ChannelClosedByBroker",
        406,
        f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{queue}' in vhost '/': {detail}",
    )


@pytest.mark.parametrize(("arg", "value"), ACCEPTED)
def test_st_1_stream_arguments_are_accepted(target, arg, value):
    assert (
        _declare(target, target.name("a"), durable=True, arguments={**STREAM, arg: value}) == "ok"
    )


# 3.10.8's order (observed): the queue type, then the values of the arguments the type takes,
# then the first argument (in the client's order) the type does not take, whatever its value.
CHECK_ORDER = [
    ({**STREAM, "x-message-ttl": "abc"}, "x-message-ttl", None),
    ({**STREAM, "x-max-priority": 300}, "x-max-priority", None),
    ({**STREAM, "x-overflow": "bogus"}, "x-overflow", None),
    ({**STREAM, "x-dead-letter-routing-key": 5}, "x-dead-letter-routing-key", None),
    ({**STREAM, "x-message-ttl": 5, "x-dead-letter-routing-key": "k"}, "x-message-ttl", None),
    ({**STREAM, "x-dead-letter-routing-key": "k", "x-message-ttl": 5}, "x-dead-letter-routing-key",
     None),
    ({**STREAM, "x-quorum-initial-group-size": 1, "x-max-length": 5},
     "x-quorum-initial-group-size", None),
    ({**STREAM, "x-message-ttl": 5, "x-max-length-bytes": -1}, "x-max-length-bytes",
     "{value_negative,-1}"),
    ({"x-queue-type": "quorum", "x-max-priority": 300}, "x-max-priority", None),
    ({"x-queue-type": "bogus", "x-message-ttl": "abc"}, "x-queue-type",
     "\"unsupported queue type 'bogus'\""),
]  # fmt: skip


@pytest.mark.parametrize(("arguments", "arg", "detail"), CHECK_ORDER)
def test_st_1_values_of_the_types_own_arguments_are_checked_before_other_types_arguments(
    target, arguments, arg, detail
):
    queue = target.name("a")
    module = "rabbit_quorum_queue" if arguments["x-queue-type"] == "quorum" else TYPE_MODULE
    refused = f" of queue type {module}" if detail is None else f": {detail}"
    assert _declare(target, queue, durable=True, arguments=arguments) == (
        "ChannelClosedByBroker",
        406,
        f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{queue}' in vhost '/'{refused}",
    )
    assert target.api.get(f"/queues/%2F/{queue}").status == 404


def test_st_1_a_malformed_max_age_is_541_before_other_types_arguments(target):
    arguments = {**STREAM, "x-message-ttl": "abc", "x-max-age": "bogus"}
    assert _declare(target, target.name("a"), durable=True, arguments=arguments) == (
        "ConnectionClosedByBroker",
        541,
        "INTERNAL_ERROR",
    )


def test_st_1_a_malformed_max_age_closes_the_connection_with_541(target):
    assert _declare(
        target, target.name("a"), durable=True, arguments={**STREAM, "x-max-age": "bogus"}
    ) == ("ConnectionClosedByBroker", 541, "INTERNAL_ERROR")
    assert target.api.get(f"/queues/%2F/{target.name('a')}").status == 404


def test_st_1_redeclare_compares_the_type_and_the_stream_arguments(target):
    queue = _stream(target, count=0)
    prefix = "PRECONDITION_FAILED - inequivalent arg"
    assert _declare(target, queue, durable=True, arguments=STREAM) == "ok"
    assert _declare(target, queue, durable=True) == (
        "ChannelClosedByBroker",
        406,
        f"{prefix} 'x-queue-type' for queue '{queue}' in vhost '/': received none but current "
        "is the value 'stream' of type 'longstr'",
    )
    assert _declare(target, queue, durable=True, arguments={**STREAM, "x-max-age": "1D"}) == (
        "ChannelClosedByBroker",
        406,
        f"{prefix} 'x-max-age' for queue '{queue}' in vhost '/': received the value '1D' of "
        "type 'longstr' but current is none",
    )


def test_st_2_consuming_needs_a_prefetch_and_acks(target):
    queue = _stream(target, count=1)
    text = f"consumer prefetch count is not set for 'queue '{queue}' in vhost '/''"
    refused = ("ChannelClosedByBroker", 406, f"PRECONDITION_FAILED - {text}")
    assert _consume(target, queue, prefetch=None) == refused
    assert _consume(target, queue, prefetch=0) == refused
    connection = target.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=10, global_qos=True)  # a channel-wide one does not count
    assert closed_by_broker(lambda: channel.basic_consume(queue, lambda *a: None)) == refused[1:]
    assert _consume(target, queue, auto_ack=True) == (
        "ConnectionClosedByBroker",
        540,
        f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues queue "
        f"'{queue}' in vhost '/'",
    )
    assert _consume(target, queue, arguments={"x-priority": 3}) == (
        "ChannelClosedByBroker",
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{queue}' in vhost '/' of "
        "queue type rabbit_stream_queue",
    )


def test_st_2_every_delivery_carries_its_offset_as_a_long(target):
    queue = _stream(target)
    _, got, _ = _consume(target, queue, expect=5, arguments={"x-stream-offset": "first"})
    assert [(tag, redelivered, body) for tag, redelivered, _, body in got] == [
        (1, False, b"m0"), (2, False, b"m1"), (3, False, b"m2"), (4, False, b"m3"), (5, False, b"m4")
    ]  # fmt: skip
    assert [headers for _, _, headers, _ in got] == [
        {"x-stream-offset": 0},
        {"x-stream-offset": 1},
        {"h": 2, "x-stream-offset": 2},
        {"x-stream-offset": 3},
        {"x-stream-offset": 4},
    ]
    assert list(got[2][2]) == ["h", "x-stream-offset"]  # appended after the publisher's
    # pika decodes 'l' (long) as a Python int of its own subclass only for longs
    assert all(type(headers["x-stream-offset"]).__name__ == "long" for _, _, headers, _ in got)


OFFSETS = [
    ("first", [0, 1, 2, 3, 4]),
    ("last", [4]),
    ("next", []),
    (0, [0, 1, 2, 3, 4]),
    (2, [2, 3, 4]),
    (4, [4]),
    (5, []),
    (99, []),
    (-1, [0, 1, 2, 3, 4]),
    ("1h", [0, 1, 2, 3, 4]),
    ("1D", [0, 1, 2, 3, 4]),
    (datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC), [0, 1, 2, 3, 4]),
    (datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC), []),
]


def test_st_2_where_a_consumer_starts(target):
    queue = _stream(target)
    for spec, expected in OFFSETS:
        _, got, _ = _consume(
            target, queue, wait=0.5, expect=len(expected), arguments={"x-stream-offset": spec}
        )
        assert (spec, _offsets(got)) == (spec, expected)
    _, got, _ = _consume(target, queue, wait=0.5)
    assert _offsets(got) == []  # no x-stream-offset: next


@pytest.mark.parametrize("spec", ["bogus", "FIRST", True])
def test_st_2_a_malformed_offset_closes_the_connection_with_541(target, spec):
    queue = _stream(target, count=1)
    assert _consume(target, queue, arguments={"x-stream-offset": spec}) == (
        "ConnectionClosedByBroker",
        541,
        "INTERNAL_ERROR",
    )


def test_st_3_acks_return_credit_and_consumers_are_independent(target):
    queue = _stream(target)
    channel, got, connection = _consume(
        target, queue, prefetch=2, expect=2, arguments={"x-stream-offset": 0}
    )
    _, other_got, other_connection = _consume(
        target, queue, prefetch=3, expect=3, arguments={"x-stream-offset": 1}
    )
    assert _offsets(got) == [0, 1]
    assert _offsets(other_got) == [1, 2, 3]
    channel.basic_ack(got[0][0])
    connection.process_data_events(0.5)  # a delivery past the credit would show up here
    _process_until(connection, lambda: len(got) >= 3, "the delivery one ack's credit allows")
    assert _offsets(got) == [0, 1, 2]
    channel.basic_ack(got[2][0], multiple=True)
    connection.process_data_events(0.5)
    _process_until(connection, lambda: len(got) >= 5, "the deliveries two acks' credit allows")
    assert _offsets(got) == [0, 1, 2, 3, 4]
    other_connection.process_data_events(0.2)
    assert _offsets(other_got) == [1, 2, 3]  # its own credit, its own cursor


def test_st_3_a_consumer_at_the_end_waits_for_new_messages(target):
    queue = _stream(target, count=2)
    _, got, connection = _consume(target, queue, arguments={"x-stream-offset": "next"})
    assert got == []
    publisher = target.channel()
    publisher.basic_publish("", queue, b"later")
    connection.process_data_events(0.2)
    wait_for(lambda: (connection.process_data_events(0.1), got)[1], what="the new message")
    assert [(headers, body) for _, _, headers, body in got] == [({"x-stream-offset": 2}, b"later")]


@pytest.mark.parametrize("method", ["nack", "nack-requeue", "reject", "reject-requeue"])
def test_st_3_nack_and_reject_close_the_connection_with_540(target, method):
    queue = _stream(target, count=2)
    channel, got, connection = _consume(
        target, queue, expect=2, arguments={"x-stream-offset": "first"}
    )
    tag = got[0][0]
    requeue = method.endswith("requeue")

    def settle():
        if method.startswith("nack"):
            channel.basic_nack(tag, requeue=requeue)
        else:
            channel.basic_reject(tag, requeue=requeue)
        _process_until(connection, lambda: not connection.is_open, "the broker's close")

    assert closed_by_broker(settle) == (
        540,
        f"NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream queues queue "
        f"'{queue}' in vhost '/'",
    )


def test_st_3_basic_recover_with_a_streams_deliveries_unacked_is_541(target):
    queue = _stream(target, count=2)
    channel, got, connection = _consume(
        target, queue, expect=2, arguments={"x-stream-offset": "first"}
    )
    assert len(got) == 2

    def recover():
        channel.basic_recover(requeue=True)
        _process_until(connection, lambda: not connection.is_open, "the broker's close")

    assert closed_by_broker(recover) == (541, "INTERNAL_ERROR")


def test_st_3_an_unknown_delivery_tag_closes_the_channel(target):
    queue = _stream(target, count=1)
    channel, _, connection = _consume(target, queue, arguments={"x-stream-offset": "first"})
    channel.basic_ack(99)
    _process_until(connection, lambda: not channel.is_open, "the channel's close")
    connection.process_data_events(0.5)  # a close of the whole connection would come here
    assert not channel.is_open
    assert connection.is_open


def test_st_4_basic_get_and_purge_close_the_connection_with_540(target):
    queue = _stream(target, count=2)
    for what, action in (
        ("basic.get", lambda channel: channel.basic_get(queue)),
        ("basic.get", lambda channel: channel.basic_get(queue, auto_ack=True)),
        ("queue.purge", lambda channel: channel.queue_purge(queue)),
    ):
        channel = target.connect().channel()
        assert closed_by_broker(lambda channel=channel, action=action: action(channel)) == (
            540,
            f"NOT_IMPLEMENTED - {what} not supported by stream queues queue '{queue}' in vhost '/'",
        )
    _, got, _ = _consume(target, queue, expect=2, arguments={"x-stream-offset": "first"})
    assert len(got) == 2  # nothing was taken or dropped


STREAM_ITEM_KEYS = {
    "arguments", "auto_delete", "consumers", "durable", "effective_policy_definition",
    "exclusive", "members", "memory", "messages", "messages_details", "messages_ready",
    "messages_ready_details", "messages_unacknowledged", "messages_unacknowledged_details",
    "name", "node", "online", "operator_policy", "policy", "readers", "state", "type", "vhost",
}  # fmt: skip
# Hutch's own fields, so a reader can plan a range without consuming (docs/streams.md).
HUTCH_STREAM_KEYS = {"first_offset", "last_offset", "next_offset", "segments"}
ERLANG_INTERNALS = {"garbage_collection", "reductions", "reductions_details"}


def test_st_5_the_management_item_of_a_stream(target):
    queue = _stream(target)
    _consume(target, queue, arguments={"x-stream-offset": "first"})

    def item():
        body = target.api.get(f"/queues/%2F/{queue}").body
        return body if body.get("messages") == 5 and "readers" in body else None

    body = wait_for(item, timeout=15, what="the stream's counts")
    keys = set(body) - ERLANG_INTERNALS - {"message_stats", "consumer_details", "deliveries"}
    keys -= {"incoming"}
    assert keys == STREAM_ITEM_KEYS | (HUTCH_STREAM_KEYS if target.is_hutch else set())
    node = body["node"]
    assert {k: body[k] for k in ("type", "durable", "messages", "messages_ready")} == {
        "type": "stream",
        "durable": True,
        "messages": 5,
        "messages_ready": 5,
    }
    assert body["members"] == body["online"] == [node]
    assert body["arguments"] == STREAM
    if target.is_hutch:
        assert {key: body[key] for key in HUTCH_STREAM_KEYS} == {
            "first_offset": 0,
            "last_offset": 4,
            "next_offset": 5,
            "segments": 1,
        }
    definitions = target.api.get("/definitions").body["queues"]
    assert [q for q in definitions if q["name"] == queue] == [
        {"name": queue, "vhost": "/", "durable": True, "auto_delete": False, "arguments": STREAM}
    ]


def _wait_item(target, queue, ready):
    def probe():
        body = target.api.get(f"/queues/%2F/{queue}").body
        return body if isinstance(body, dict) and ready(body) else None

    return wait_for(probe, timeout=20, what=f"the item of {queue}")


def test_st_5_policies_set_a_streams_retention_keys(target):
    queue = _stream(target, count=0)
    definition = {
        "max-age": "1D",
        "stream-max-segment-size-bytes": 1_000_000,
        "max-length-bytes": 100_000,
    }
    body = _wait_item(target, queue, lambda body: "policy" in body)
    assert (body["policy"], body["effective_policy_definition"]) == (None, {})
    streams = target.api.put(
        f"/policies/%2F/{target.name('streams')}",
        {"pattern": target.anchored("s"), "apply-to": "queues", "definition": definition},
    )
    assert streams.status in (201, 204)
    body = _wait_item(target, queue, lambda body: body.get("policy") == target.name("streams"))
    assert body["effective_policy_definition"] == definition


def test_st_5_definitions_import_and_export_a_stream(target):
    queue = target.name("imported")
    arguments = {**STREAM, "x-max-age": "7D", "x-stream-max-segment-size-bytes": 1_000_000}
    item = {"name": queue, "vhost": "/", "durable": True, "auto_delete": False,
            "arguments": arguments}  # fmt: skip
    imported = target.api.post("/definitions", {"queues": [item]})
    assert imported.status in (200, 201, 204)
    body = _wait_item(target, queue, lambda body: "type" in body)
    assert (body["type"], body["arguments"], body["durable"]) == ("stream", arguments, True)
    exported = target.api.get("/definitions").body["queues"]
    assert [q for q in exported if q["name"] == queue] == [item]
    publisher = target.channel()
    publisher.basic_publish("", queue, b"x")
    _, got, _ = _consume(target, queue, expect=1, arguments={"x-stream-offset": "first"})
    assert [(headers, body) for _, _, headers, body in got] == [({"x-stream-offset": 0}, b"x")]


def test_st_4_management_get_and_purge_of_a_stream(target):
    queue = _stream(target, count=2)
    declared = target.connect().channel().queue_declare(queue, durable=True, arguments=STREAM)
    get = target.api.post(
        f"/queues/%2F/{queue}/get",
        {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
    )
    purge = target.api.delete(f"/queues/%2F/{queue}/contents")
    assert declared.method.message_count == 0  # 3.10.8: a stream reports no ready count here
    assert (get.status, get.body) == (
        400,
        {
            "error": "bad_request",
            "reason": f"540 basic.get not supported by stream queues queue '{queue}' in vhost '/'",
        },
    )
    assert (purge.status, purge.body) == (
        400,
        {
            "error": "bad_request",
            "reason": f"queue.purge not supported by stream queues queue '{queue}' in vhost '/'",
        },
    )


def _long(value):
    return b"l" + struct.pack(">q", value)


def _headers(*entries):
    """Raw properties: the headers flag, then a table of (name, tagged value) in this order."""
    body = b"".join(bytes([len(name)]) + name.encode() + value for name, value in entries)
    return b"\x20\x00" + struct.pack(">I", len(body)) + body


def _raw_deliveries(target, queue, count):
    """The raw properties of the first ``count`` deliveries from the stream's first offset,
    read off the socket: what a table with two entries of one name would look like."""
    sock = rawamqp.open_connection(target.broker)
    sock.settimeout(60)  # a bound on each read, not a wait: a loaded machine may be slow to send
    try:
        sock.sendall(frame.marshal(commands.Basic.Qos(prefetch_count=100), 1))
        assert isinstance(rawamqp.read_frame(sock), commands.Basic.QosOk)
        arguments = {"x-stream-offset": "first"}
        consume = commands.Basic.Consume(queue=queue, consumer_tag="c", arguments=arguments)
        sock.sendall(frame.marshal(consume, 1))
        assert isinstance(rawamqp.read_frame(sock), commands.Basic.ConsumeOk)
        got = []
        for _ in range(count):
            frames = []
            for _ in range(3):  # deliver, content header, body
                head = rawamqp.read_exact(sock, 7)
                payload = rawamqp.read_exact(sock, struct.unpack(">I", head[3:7])[0] + 1)[:-1]
                frames.append((head[0], payload))
            assert [kind for kind, _ in frames] == [1, 2, 3]
            got.append(frames[1][1][12:])  # after class, weight and body size
    finally:
        sock.close()
    return got


def test_st_2_a_publishers_own_offset_header_gives_way_to_the_brokers(target):
    """A message published with its own ``x-stream-offset`` (999 as pika sends an int, a
    string, a long, or twice in one table) is delivered with the broker's offset, a long, in
    the publisher's header's place: one header, not two, and never the publisher's value. Of a
    publisher's two, the first is replaced and the second kept, as 3.10.8 does."""
    queue = target.name("own-offset")
    assert _declare(target, queue, durable=True, arguments=STREAM) == "ok"
    channel = target.channel()
    published = [
        {"x-stream-offset": 999},
        {"h": "v", "x-stream-offset": 999},
        {"x-stream-offset": "999"},
        {"x-stream-offset": 2**40},
    ]
    for headers in published:
        channel.basic_publish("", queue, b"m", pika.BasicProperties(headers=headers))
    sock = rawamqp.open_connection(target.broker)
    sock.settimeout(60)
    try:
        sock.sendall(frame.marshal(commands.Confirm.Select(), 1))
        assert isinstance(rawamqp.read_frame(sock), commands.Confirm.SelectOk)
        twice = _headers(
            ("x-stream-offset", b"I" + struct.pack(">i", 999)), ("x-stream-offset", _long(7))
        )
        sock.sendall(rawamqp.publish_frames(queue, twice, b"m"))
        assert isinstance(rawamqp.read_frame(sock), commands.Basic.Ack)
    finally:
        sock.close()

    assert _raw_deliveries(target, queue, 5) == [
        _headers(("x-stream-offset", _long(0))),
        _headers(("h", b"S" + struct.pack(">I", 1) + b"v"), ("x-stream-offset", _long(1))),
        _headers(("x-stream-offset", _long(2))),
        _headers(("x-stream-offset", _long(3))),
        _headers(("x-stream-offset", _long(4)), ("x-stream-offset", _long(7))),
    ]
    _, got, _ = _consume(target, queue, expect=5, arguments={"x-stream-offset": "first"})
    offsets = [headers["x-stream-offset"] for _, _, headers, _ in got]
    assert offsets == [0, 1, 2, 3, 7]  # pika keeps the last of two: the publisher's second
    assert all(type(offset).__name__ == "long" for offset in offsets)
