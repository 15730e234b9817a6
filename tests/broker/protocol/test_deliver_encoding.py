"""The delivery side's output: byte-exact frames, and a turn's output as one buffer (#32).

Why: a delivery is written around its consumer's constant bytes and its route's encoded names,
kept per consumer and route (``DeliverHead.route``, ``codec.deliver_frames``), and a turn's frames are joined before the socket sees them; both are speed work on the hot
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
from hutch_broker.protocol import errors as proto_errors
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


def _record(exchange: str, key: str, raw: bytes, payload: bytes) -> tuple:
    """A record as ``send_deliver_run`` reads it: the store's ``RunRecord`` shape, the fields
    it does not send filled with what it must not look at."""
    return (None, None, None, exchange, key, raw, payload, None)


@pytest.mark.parametrize("frame_max", [4096, 131072])
def test_a_run_is_byte_identical_to_its_deliveries_one_by_one(make_driver, frame_max):
    """``send_deliver_run``: the stream reader's loop; its bytes are ``send_deliver``'s, over
    body sizes from empty to several frames, routes that change within the run, every
    property set, and a consumer tag of every length."""
    chunk = frame_max - 8
    sizes = [0, 1, 200, chunk - 1, chunk, chunk + 1, 3 * chunk + 5]
    routes = [("", "s"), ("", "s"), ("amq.topic", "a.b"), ("\u00fcber", "k" * 255), ("", "s")]
    rng = random.Random(frame_max)
    for tag in ["c", "ctag-\u2603", "t" * 255]:
        run = [
            _record(exchange, key, rng.choice(PROPERTIES).marshal(), rng.randbytes(size))
            for size in sizes
            for exchange, key in routes
        ]
        one_by_one = make_driver().handshake(frame_max=frame_max)
        at_once = make_driver().handshake(frame_max=frame_max)
        for driver in (one_by_one, at_once):
            driver.open_channel(3)
        for n, (_, _, _, exchange, key, raw, payload, _) in enumerate(run):
            one_by_one.conn.send_deliver(3, tag, 41 + n, False, exchange, key, raw, payload)
        sent = at_once.conn.send_deliver_run(3, tag, 41, run, len(run), 1 << 40, 1024)
        assert sent == (len(run), sum(len(record[6]) for record in run))
        want = b"".join(one_by_one.conn.data_to_send())
        assert b"".join(at_once.conn.data_to_send()) == want
        first = run[0]
        assert want.startswith(
            expected(3, tag, 41, False, first[3], first[4], _properties(first[5]), first[6],
                     frame_max)
        )  # fmt: skip


def _properties(raw: bytes) -> commands.Basic.Properties:
    return next(p for p in PROPERTIES if p.marshal() == raw)


def test_a_run_takes_only_its_count_and_stops_at_the_delivery_that_fills_the_room(running):
    """The room is the channel's output slice: the delivery whose body and ``per_delivery``
    reach it is the last one sent, as ``Channel.deliver`` stops after that one."""
    raw = PROPERTIES[0].marshal()
    run = [_record("", "s", raw, bytes([n]) * 100) for n in range(10)]
    assert running.conn.send_deliver_run(1, "c", 1, run, 3, 1 << 40, 50) == (3, 300)
    # 150 a delivery: the third reaches 450, so it is the last
    assert running.conn.send_deliver_run(1, "c", 4, run, 10, 450, 50) == (3, 300)
    assert running.conn.send_deliver_run(1, "c", 7, run, 10, 451, 50) == (4, 400)
    data = b"".join(running.conn.data_to_send())
    want = [expected(1, "c", tag, False, "", "s", PROPERTIES[0], bytes([n]) * 100, 131072)
            for tag, n in zip(range(1, 11), [0, 1, 2, 0, 1, 2, 0, 1, 2, 3], strict=True)]  # fmt: skip
    assert data == b"".join(want)


def test_a_run_to_a_closing_channel_is_counted_and_not_sent(running):
    """As ``send_deliver`` on a channel the broker is closing: the peer must not see it, and
    the caller's count of what went (its tags, its unacked) stays whole."""
    running.open_channel(2)
    running.conn.close_channel(2, proto_errors.AMQPError(406, "PRECONDITION_FAILED", 60, 80))
    running.conn.data_to_send()  # the channel.close
    run = [_record("", "s", PROPERTIES[0].marshal(), b"x" * 10)] * 4
    assert running.conn.send_deliver_run(2, "c", 1, run, 4, 1 << 40, 0) == (4, 40)
    assert running.conn.data_to_send() == []
