"""What a client's own frames may carry, side by side with RabbitMQ 3.10.8 (issue "Broker trust II").

Why: a client that works against RabbitMQ must not be closed by hutch-broker for something
RabbitMQ takes: a message ``timestamp`` is any 64-bit value (past year 9999, or milliseconds),
handed back unchanged to consumers and shown by the management API. And where RabbitMQ refuses,
Hutch refuses the same way: ``channel.flow(active=false)`` closes the connection with 540, and
a method frame with a byte after its last argument with 501 "cannot decode" and the arguments'
bytes (pamqp, which decodes Hutch's methods, ignores such bytes).
"""

import struct
import time

import pytest
from hutch_demo.management import quote
from hutch_testing.rawamqp import open_connection, publish_frames, read_frame
from hutch_testing.steps import closed_by_broker, get, publish
from pamqp import base, commands, frame

pytestmark = pytest.mark.rabbitmq

# Past year 9999 (the old cap), milliseconds since the epoch, the top bit, the largest value.
TIMESTAMPS = [253402300800, 1_700_000_000_123, 2**63, 2**64 - 1]


def test_any_64_bit_timestamp_is_carried_unchanged(target):
    q = target.name("q")
    ch = target.channel()
    ch.queue_declare(q)
    for stamp in TIMESTAMPS:
        assert publish(ch, q, str(stamp), timestamp=stamp) == "ack"

    got = [get(ch, q) for _ in TIMESTAMPS]

    assert [(fetched[1].timestamp, fetched[2]) for fetched in got if fetched] == [
        (stamp, str(stamp).encode()) for stamp in TIMESTAMPS
    ]
    assert ch.is_open and target.connection.is_open


def test_the_management_api_shows_a_timestamp_as_its_integer(target):
    q = target.name("q")
    ch = target.channel()
    ch.queue_declare(q)
    for stamp in TIMESTAMPS:
        publish(ch, q, "m", timestamp=stamp)
    body = {"count": 10, "ackmode": "ack_requeue_true", "encoding": "auto"}

    shown = target.api.post(f"/queues/%2F/{quote(q)}/get", body).body

    assert [message["properties"] for message in shown] == [{"timestamp": t} for t in TIMESTAMPS]


def test_an_http_publish_takes_any_64_bit_timestamp(target):
    q = target.name("q")
    target.channel().queue_declare(q)
    for stamp in TIMESTAMPS:
        body = {
            "properties": {"timestamp": stamp},
            "routing_key": q,
            "payload": "p",
            "payload_encoding": "string",
        }
        assert target.api.post("/exchanges/%2F/amq.default/publish", body).body == {"routed": True}

    got = [get(target.channel(), q) for _ in TIMESTAMPS]

    assert [fetched[1].timestamp for fetched in got if fetched] == TIMESTAMPS


def test_a_header_timestamp_past_year_9999_is_carried_unchanged(target):
    """The same in a headers table ('T'); pika cannot encode one, so a raw client sends it."""
    q = target.name("q")
    target.channel().queue_declare(q)
    stamp = b"T" + struct.pack(">Q", 2**64 - 1)
    entries = b"\x01t" + stamp
    raw_properties = b"\x20\x00" + struct.pack(">I", len(entries)) + entries
    sock = open_connection(target.broker)
    sock.sendall(publish_frames(q, raw_properties, b"m"))
    body = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}

    deadline = time.monotonic() + 5
    shown = target.api.post(f"/queues/%2F/{quote(q)}/get", body).body
    while not shown and time.monotonic() < deadline:
        time.sleep(0.05)
        shown = target.api.post(f"/queues/%2F/{quote(q)}/get", body).body
    sock.close()

    assert [message["properties"]["headers"] for message in shown] == [{"t": 2**64 - 1}]


def test_channel_flow_on_is_confirmed(target):
    assert target.channel(confirm=False).flow(True) is True


def test_channel_flow_off_closes_the_connection_with_540(target):
    connection = target.connect()
    ch = connection.channel()
    assert closed_by_broker(lambda: ch.flow(False)) == (540, "NOT_IMPLEMENTED - active=false")
    assert not connection.is_open


# A method frame with one byte after its last argument, as a raw client sends it.
WITH_A_BYTE_MORE = {
    "basic.publish": commands.Basic.Publish(exchange="", routing_key="trail"),
    "queue.declare": commands.Queue.Declare(queue="trail", arguments={"x-max-length": 5}),
    "basic.qos": commands.Basic.Qos(prefetch_count=5),
    "basic.ack": commands.Basic.Ack(delivery_tag=0, multiple=True),
    "channel.flow": commands.Channel.Flow(active=True),
}


def _a_byte_more(method: base.Frame) -> bytes:
    marshalled = frame.marshal(method, 1)
    size = struct.unpack(">I", marshalled[3:7])[0]
    payload = marshalled[7 : 7 + size] + b"!"
    return struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce"


@pytest.mark.parametrize("name", list(WITH_A_BYTE_MORE))
def test_a_method_with_a_byte_after_its_last_argument_closes_the_connection_with_501(target, name):
    sock = open_connection(target.broker)
    sock.sendall(_a_byte_more(WITH_A_BYTE_MORE[name]))
    close = read_frame(sock)
    sock.close()

    assert isinstance(close, commands.Connection.Close)
    method = WITH_A_BYTE_MORE[name]
    assert (close.reply_code, close.class_id, close.method_id) == (
        501,
        method.index >> 16,
        method.index & 0xFFFF,
    )
    size = len(frame.marshal(method, 1)) - 8 - 4  # the arguments: no frame header, no ids
    arguments = frame.marshal(method, 1)[11 : 11 + size] + b"!"
    assert (
        close.reply_text
        == "FRAME_ERROR - cannot decode <<" + ",".join(str(octet) for octet in arguments) + ">>"
    )
