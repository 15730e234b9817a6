"""A stream delivery's headers, byte for byte, side by side with RabbitMQ 3.10.8.

What 3.10.8 sends (observed here on the reference node, over raw sockets so every type tag
shows): the publisher's headers sorted by name with ``x-stream-offset`` (a long) among them,
set in place of a publisher's own; every header whose value is a field table or a field array
left out, even an empty one (3.10.8 keeps a stream's messages as AMQP 1.0, whose application
properties hold simple values only); every other value with its own type tag and bytes. Before,
hutch-broker kept the publisher's order and its tables and arrays, and put the offset last.
Decimals are not here: 3.10.8 closes the connection on a publish to a stream with one.
"""

from __future__ import annotations

import socket
import struct

import pytest
from hutch_testing import rawamqp
from pamqp import commands, frame

pytestmark = pytest.mark.rabbitmq

STREAM = {"x-queue-type": "stream"}
OFFSET = "x-stream-offset"


def _key(name: str) -> bytes:
    data = name.encode()
    return bytes([len(data)]) + data


def _text(value: bytes) -> bytes:
    return b"S" + struct.pack(">I", len(value)) + value


def _table(entries: list[tuple[str, bytes]]) -> bytes:
    body = b"".join(_key(name) + value for name, value in entries)
    return struct.pack(">I", len(body)) + body


# Each case: the publisher's headers, as (name, tagged value) in the order published.
CASES: dict[str, list[tuple[str, bytes]]] = {
    "scalars": [
        ("z-text", _text(b"v")),
        ("t", b"t\x01"),
        ("b", b"b\xfe"),
        ("B", b"B\xfe"),
        ("s", b"s" + struct.pack(">h", -2)),
        ("u", b"u" + struct.pack(">H", 65534)),
        ("I", b"I" + struct.pack(">i", -2)),
        ("i", b"i" + struct.pack(">I", 4_000_000_000)),
        ("l", b"l" + struct.pack(">q", -2)),
        ("f", b"f" + struct.pack(">f", 1.5)),
        ("d", b"d" + struct.pack(">d", 1.25)),
        ("T", b"T" + struct.pack(">Q", 1_700_000_000)),
        ("V", b"V"),
        ("x", b"x" + struct.pack(">I", 3) + b"\x00\x01\x02"),
        ("not-utf8", _text(b"\xff\xfe")),
    ],
    "nested": [
        ("a", _text(b"b")),
        ("n", b"b\x07"),
        ("nested", b"F" + _table([(OFFSET, _text(b"not this")), ("k", b"b\x01")])),
    ],
    "compound only": [
        ("arr", b"A" + struct.pack(">I", 2) + b"b\x01"),
        ("empty-table", b"F" + _table([])),
        ("empty-array", b"A" + struct.pack(">I", 0)),
    ],
    "order": [
        ("x-b", _text(b"1")),
        ("a", _text(b"2")),
        ("x-a", _text(b"3")),
        ("b", _text(b"4")),
        ("zz", _text(b"5")),
    ],
    "publisher's offset": [("k", _text(b"v")), (OFFSET, _text(b"mine")), ("z", _text(b"z"))],
    "repeated name": [("k", _text(b"1")), ("a", _text(b"1")), ("a", _text(b"2"))],
    "none": [],
}


def _as_3_10_8_delivers(entries: list[tuple[str, bytes]], offset: int) -> bytes:
    """The delivery's raw properties (flags, then the headers table) for these headers."""
    kept = [(name, value) for name, value in entries if value[:1] not in (b"F", b"A")]
    tagged = (OFFSET, b"l" + struct.pack(">q", offset))
    names = [name for name, _ in kept]
    if OFFSET in names:
        kept[names.index(OFFSET)] = tagged
    else:
        kept.append(tagged)
    return b"\x20\x00" + _table(sorted(kept, key=lambda entry: entry[0].encode()))


def _raw_frame(sock: socket.socket) -> tuple[int, bytes]:
    """The next frame's type and payload, undecoded."""
    head = rawamqp.read_exact(sock, 7)
    (size,) = struct.unpack(">I", head[3:7])
    return head[0], rawamqp.read_exact(sock, size + 1)[:-1]


def test_stream_deliveries_carry_the_headers_3_10_8_sends(target) -> None:
    queue = target.name("s")
    target.channel().queue_declare(queue, durable=True, arguments=STREAM)
    sock = rawamqp.open_connection(target.broker)
    sock.settimeout(60)  # a bound on each read, not a wait: a loaded machine may be slow to send
    try:
        sock.sendall(frame.marshal(commands.Confirm.Select(), 1))
        assert isinstance(rawamqp.read_frame(sock), commands.Confirm.SelectOk)
        for entries in CASES.values():
            properties = b"\x20\x00" + _table(entries) if entries else b"\x00\x00"
            sock.sendall(rawamqp.publish_frames(queue, properties, b"x"))
            assert isinstance(rawamqp.read_frame(sock), commands.Basic.Ack)
        sock.sendall(frame.marshal(commands.Basic.Qos(prefetch_count=100), 1))
        assert isinstance(rawamqp.read_frame(sock), commands.Basic.QosOk)
        consume = commands.Basic.Consume(queue=queue, consumer_tag="c", arguments={OFFSET: "first"})
        sock.sendall(frame.marshal(consume, 1))
        assert isinstance(rawamqp.read_frame(sock), commands.Basic.ConsumeOk)

        got = {}
        for name in CASES:
            kinds = [_raw_frame(sock) for _ in range(3)]  # deliver, content header, body
            assert [kind for kind, _ in kinds] == [1, 2, 3], name
            got[name] = kinds[1][1][12:]  # after class, weight and body size
    finally:
        sock.close()

    expected = {
        name: _as_3_10_8_delivers(entries, offset)
        for offset, (name, entries) in enumerate(CASES.items())
    }
    assert got == expected
