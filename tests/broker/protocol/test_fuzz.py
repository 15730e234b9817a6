"""Hostile input: whatever the bytes, ``next_event`` raises nothing but ``AMQPError``.

Seeded and bounded (a few thousand cases, well under a second each file run), so failures
reproduce.  The loop plays dispatch: it accepts logins and vhosts, answers publishes with
deliveries, closes channels on SoftError and the connection on HardError, and checks that every
byte we send back is still valid AMQP (pamqp decodes it).
"""

from __future__ import annotations

import random
import struct

from hutch_broker.protocol import connection, errors, events
from pamqp import commands

PROPS = commands.Basic.Properties(
    content_type="text/plain", headers={"a": 1, "b": [1, "x"], "c": {"d": 2.5}}, delivery_mode=2
)


def client_stream(frames) -> bytes:
    publish = frames.publish
    return b"".join(
        [
            b"AMQP\x00\x00\x09\x01",
            frames.method(0, commands.Connection.StartOk(mechanism="PLAIN", response="\0u\0p")),
            frames.method(0, commands.Connection.TuneOk(16, 4096, 10)),
            frames.method(0, commands.Connection.Open("/")),
            frames.method(1, commands.Channel.Open()),
            frames.method(2, commands.Channel.Open()),
            frames.method(1, commands.Queue.Declare(queue="q", arguments={"x-max-length": 5})),
            publish(1, b"hello" * 300, routing_key="q", properties=PROPS, frame_max=4096),
            frames.method(2, commands.Basic.Consume(queue="q", consumer_tag="c")),
            publish(2, b"", routing_key="q", mandatory=True),
            frames.method(2, commands.Basic.Ack(1, multiple=True)),
            frames.method(1, commands.Basic.Nack(2, requeue=False)),
            b"\x08\x00\x00\x00\x00\x00\x00\xce",
            frames.method(2, commands.Channel.Close(200, "bye", 0, 0)),
            publish(1, b"x" * 5000, exchange="amq.topic", routing_key="a.b", frame_max=4096),
            frames.method(0, commands.Connection.Close(200, "bye", 0, 0)),
        ]
    )


def play(conn: connection.Connection, data: bytes, rng: random.Random, frames) -> None:
    """Feed ``data`` in random chunks, reacting like dispatch; only AMQPError may surface."""
    pos = 0
    while pos < len(data) and not conn.closed:
        step = rng.randrange(1, 2000)
        conn.receive_data(data[pos : pos + step])
        pos += step
        drain(conn)
        frames.decode(b"".join(conn.data_to_send()))  # our output stays valid AMQP


def drain(conn: connection.Connection) -> None:
    for _ in range(10_000):
        try:
            event = conn.next_event()
        except errors.AMQPError as exc:
            fail(conn, exc)
            continue
        if event is connection.NEED_DATA:
            return
        react(conn, event)
    raise AssertionError("next_event did not reach NEED_DATA")


def fail(conn: connection.Connection, exc: errors.AMQPError) -> None:
    """What dispatch does with an error, checking that it is a well-formed one."""
    if isinstance(exc, errors.SoftError):
        assert exc.channel
        assert exc.reply_text.startswith(errors.SOFT_CODES[exc.reply_code] + " - ")
        conn.close_channel(exc.channel, exc)
    else:
        assert isinstance(exc, errors.HardError)
        assert exc.reply_text.startswith(errors.HARD_CODES[exc.reply_code] + " - ")
        conn.close(exc)


def react(conn: connection.Connection, event: events.Event) -> None:
    if isinstance(event, events.StartOkReceived):
        conn.accept_login()
    elif isinstance(event, events.OpenReceived):
        conn.accept_open()
    elif isinstance(event, events.PublishReceived):
        conn.send_deliver(
            event.channel,
            "ctag",
            1,
            False,
            event.exchange,
            event.routing_key,
            event.raw_properties,
            event.body,
        )
        if event.mandatory:
            conn.send_return(
                event.channel,
                312,
                "NO_ROUTE",
                event.exchange,
                event.routing_key,
                event.raw_properties,
                event.body,
            )
    elif isinstance(event, events.MethodReceived) and event.channel:
        conn.send_method(event.channel, commands.Basic.Ack(1))


def new_connection() -> connection.Connection:
    return connection.Connection(server_properties={"product": "Hutch"})


def test_the_unmutated_stream_is_clean(frames):
    conn = new_connection()
    conn.receive_data(client_stream(frames))
    seen = []
    while (event := conn.next_event()) is not connection.NEED_DATA:
        seen.append(type(event).__name__)
        react(conn, event)
    assert seen.count("PublishReceived") == 3
    assert seen[-1] == "ConnectionCloseRequested"


def test_fuzz_mutated_sessions(frames):
    rng = random.Random(20240501)
    stream = client_stream(frames)
    for _ in range(600):
        data = bytearray(stream)
        for _ in range(rng.randrange(1, 6)):
            position = rng.randrange(len(data) + 1)
            action = rng.randrange(5)
            if action == 0 and position < len(data):
                data[position] = rng.randrange(256)
            elif action == 1 and position < len(data):
                data[position] ^= 1 << rng.randrange(8)
            elif action == 2:
                del data[position : position + rng.randrange(1, 40)]
            elif action == 3:
                data[position:position] = rng.randbytes(rng.randrange(1, 40))
            else:
                start = rng.randrange(len(data))
                data[position:position] = data[start : start + rng.randrange(1, 200)]
        play(new_connection(), bytes(data), rng, frames)


def test_fuzz_random_bytes_after_the_handshake(frames):
    rng = random.Random(7)
    prefix = client_stream(frames).split(frames.method(1, commands.Channel.Open()))[0]
    for _ in range(400):
        play(new_connection(), prefix + rng.randbytes(rng.randrange(1, 3000)), rng, frames)


def random_frame(rng: random.Random) -> bytes:
    frame_type = rng.choice([1, 1, 1, 2, 3, 8, rng.randrange(256)])
    channel = rng.choice([0, 1, 2, 3, rng.randrange(65536)])
    if frame_type == 1 and rng.random() < 0.8:
        index = rng.choice(list(commands.INDEX_MAPPING))
        payload = struct.pack(">I", index) + rng.randbytes(rng.randrange(0, 40))
    elif frame_type == 2 and rng.random() < 0.8:
        flags = rng.randrange(65536) & ~3
        payload = struct.pack(">HHQH", 60, 0, rng.randrange(0, 100), flags)
        payload += rng.randbytes(rng.randrange(0, 60))
    else:
        payload = rng.randbytes(rng.randrange(0, 50))
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"


def test_fuzz_well_framed_random_frames(frames):
    """Valid framing, random content: reaches the method, content and channel rules."""
    rng = random.Random(42)
    prefix = client_stream(frames).split(frames.method(1, commands.Queue.Declare(queue="q")))[0]
    for _ in range(400):
        data = prefix + b"".join(random_frame(rng) for _ in range(rng.randrange(1, 30)))
        play(new_connection(), data, rng, frames)
