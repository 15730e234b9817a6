"""The delivery side's output: byte-exact frames, and a turn's output as one buffer (#32).

Why: a delivery is encoded with one ``struct`` per consumer and route (``DeliverHead.route``)
and a turn's frames are joined before the socket sees them; both are speed work on the hot
path, so these tests hold the bytes to pamqp's encoding over a matrix of properties, body
sizes, frame sizes, names and consumer tags, across route reuse and the route memo's bound,
and pin that the route is built once, not per delivery.
"""

from __future__ import annotations

import datetime
import random

import pytest
from hutch_broker.protocol import codec
from hutch_broker.protocol import connection as proto_connection
from pamqp import body, commands, header
from pamqp import frame as pamqp_frame

PROPERTIES = [
    commands.Basic.Properties(),
    commands.Basic.Properties(delivery_mode=1, message_id="m"),
    commands.Basic.Properties(content_type="text/plain", delivery_mode=2, headers={"k": "v"}),
    commands.Basic.Properties(
        content_type="application/json",
        content_encoding="gzip",
        headers={"a": 1, "nested": {"b": [1, "x"]}},
        delivery_mode=2,
        priority=9,
        correlation_id="c" * 200,
        reply_to="amq.rabbitmq.reply-to",
        expiration="60000",
        message_id="\u00e9t\u00e9",
        timestamp=datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC),
        message_type="t",
        user_id="guest",
        app_id="bench",
    ),
]


def expected(
    channel: int,
    tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    key: str,
    properties: commands.Basic.Properties,
    payload: bytes,
    frame_max: int,
) -> bytes:
    """pamqp's encoding of the same delivery, its body cut at ``frame_max``."""
    parts = [
        pamqp_frame.marshal(
            commands.Basic.Deliver(tag, delivery_tag, redelivered, exchange, key), channel
        ),
        pamqp_frame.marshal(header.ContentHeader(0, len(payload), properties), channel),
    ]
    chunk = frame_max - 8
    for offset in range(0, len(payload), chunk):
        piece = payload[offset : offset + chunk]
        parts.append(pamqp_frame.marshal(body.ContentBody(piece), channel))
    return b"".join(parts)


@pytest.mark.parametrize("frame_max", [4096, 131072])
@pytest.mark.parametrize("properties", PROPERTIES, ids=["none", "two", "headers", "all"])
def test_deliveries_are_byte_identical_to_pamqp_over_a_matrix(make_driver, frame_max, properties):
    driver = make_driver().handshake(frame_max=frame_max)
    driver.open_channel(7)
    raw = properties.marshal()
    chunk = frame_max - 8
    sizes = [0, 1, 1024, chunk - 1, chunk, chunk + 1, 2 * chunk, 3 * chunk + 5]
    routes = [
        ("", "q"),
        ("amq.topic", "a.b.c"),
        ("\u00fcber", "k\u00e9y." * 51),
        ("x" * 127, ""),
    ]  # pamqp allows 127 for an exchange
    tags = ["c", "ctag-\u2603", "t" * 255]
    rng = random.Random(frame_max)
    want = []
    delivery_tag = 0
    # Each route twice per tag: the second delivery reads the route the first one built.
    for _ in range(2):
        for size in sizes:
            for exchange, key in routes:
                for tag in tags:
                    delivery_tag += 1
                    payload = rng.randbytes(size)
                    redelivered = delivery_tag % 3 == 0
                    driver.conn.send_deliver(
                        7, tag, delivery_tag, redelivered, exchange, key, raw, payload
                    )
                    want.append(
                        expected(
                            7, tag, delivery_tag, redelivered, exchange, key, properties,
                            payload, frame_max,
                        )
                    )  # fmt: skip
    assert b"".join(driver.conn.data_to_send()) == b"".join(want)


def test_unsigned_64_bit_delivery_tags_past_pamqp_signed_range(running):
    raw = PROPERTIES[1].marshal()
    running.conn.send_deliver(1, "c", 2**64 - 1, True, "e", "k", raw, b"body")
    data = b"".join(running.conn.data_to_send())
    # frame header (7), class and method (4), the consumer tag "c" (2): then the tag and flag
    assert data[13:22] == b"\xff" * 8 + b"\x01"


def test_a_route_is_built_once_per_consumer_not_per_delivery(running, monkeypatch):
    built = []
    route = codec.DeliverHead.route

    def counting(self, exchange, routing_key):
        built.append((exchange, routing_key))
        return route(self, exchange, routing_key)

    monkeypatch.setattr(codec.DeliverHead, "route", counting)
    raw = PROPERTIES[1].marshal()
    for tag in range(1, 101):
        running.conn.send_deliver(1, "c", tag, False, "", "q", raw, b"x" * 10)
        running.conn.send_deliver(1, "c", tag + 1000, False, "amq.direct", "k", raw, b"y")
    assert built == [("", "q"), ("amq.direct", "k")]


def test_the_route_memo_is_bounded_and_rebuilds_what_it_dropped(running):
    raw = PROPERTIES[0].marshal()
    limit = codec._ROUTES_PER_CONSUMER
    want = []
    for n in range(limit + 10):
        running.conn.send_deliver(1, "c", n + 1, False, "x", f"k{n}", raw, b"b")
        want.append(expected(1, "c", n + 1, False, "x", f"k{n}", PROPERTIES[0], b"b", 131072))
    running.conn.send_deliver(1, "c", 1, False, "x", "k0", raw, b"b")  # dropped, built again
    want.append(expected(1, "c", 1, False, "x", "k0", PROPERTIES[0], b"b", 131072))
    assert len(running.conn._deliver_heads[(1, "c")].routes) <= limit
    assert b"".join(running.conn.data_to_send()) == b"".join(want)


def test_a_name_too_long_is_refused_and_nothing_is_sent(running):
    with pytest.raises(ValueError, match="longer than 255"):
        running.conn.send_deliver(1, "c", 1, False, "", "k" * 256, b"\x00\x00", b"x")
    assert running.conn.data_to_send() == []


def test_a_turns_output_comes_as_one_buffer(running, frames):
    raw = PROPERTIES[1].marshal()
    for tag in range(1, 501):
        running.conn.send_deliver(1, "c", tag, False, "", "q", raw, b"m" * 1024)
    running.conn.send_method(1, commands.Basic.Ack(7, multiple=True))
    data = running.conn.data_to_send()
    assert len(data) == 1
    decoded = [frame for _, frame in frames.decode(data[0])]
    assert [f.delivery_tag for f in decoded if isinstance(f, commands.Basic.Deliver)] == list(
        range(1, 501)
    )
    assert isinstance(decoded[-1], commands.Basic.Ack)
    assert running.conn.data_to_send() == []


def test_output_past_the_join_bound_stays_in_pieces_and_in_order(running):
    raw = PROPERTIES[0].marshal()
    big = b"B" * (proto_connection.JOIN_UP_TO // 2 + 1)
    running.conn.send_deliver(1, "c", 1, False, "", "q", raw, big)
    running.conn.send_deliver(1, "c", 2, False, "", "q", raw, big)
    running.conn.send_deliver(1, "c", 3, False, "", "q", raw, b"small")
    data = running.conn.data_to_send()
    assert len(data) > 1  # not copied into one buffer
    want = [expected(1, "c", n, False, "", "q", PROPERTIES[0], b, 131072) for n, b in
            ((1, big), (2, big), (3, b"small"))]  # fmt: skip
    assert b"".join(data) == b"".join(want)


def test_pending_output_shows_the_frames_without_taking_them(running):
    """What bench/flush_stats.py's hook reads before a flush: a copy, the queue untouched."""
    raw = PROPERTIES[0].marshal()
    running.conn.send_deliver(1, "c", 1, False, "", "q", raw, b"one")
    running.conn.send_deliver(1, "c", 2, False, "", "q", raw, b"two")
    pending = running.conn.pending_output
    assert len(pending) == 2
    assert running.conn.pending_output == pending  # reading it takes nothing
    assert running.conn.data_to_send() == [b"".join(pending)]
    assert running.conn.pending_output == ()
