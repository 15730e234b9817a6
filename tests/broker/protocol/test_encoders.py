"""Hand-written output fast paths against pamqp: byte-identical frames (IMPL-4)."""

from __future__ import annotations

import random

import pytest
from hutch_broker.protocol import codec
from pamqp import body, commands, header
from pamqp import frame as pamqp_frame

PROPS = commands.Basic.Properties(content_type="text/plain", delivery_mode=2, headers={"k": "v"})
RAW = PROPS.marshal()


def pamqp_content(channel: int, payload: bytes, frame_max: int) -> bytes:
    parts = [pamqp_frame.marshal(header.ContentHeader(0, len(payload), PROPS), channel)]
    chunk = frame_max - 8
    for offset in range(0, len(payload), chunk):
        parts.append(
            pamqp_frame.marshal(body.ContentBody(payload[offset : offset + chunk]), channel)
        )
    return b"".join(parts)


def sent(driver) -> bytes:
    return b"".join(driver.conn.data_to_send())


@pytest.mark.parametrize("size", [0, 1, 1024, 131064, 131065, 300_000])
@pytest.mark.parametrize("redelivered", [False, True])
def test_deliver_is_byte_identical_to_pamqp(running, size, redelivered):
    payload = random.Random(size).randbytes(size)
    running.conn.send_deliver(
        1, "ctag-1", 2**40 + 7, redelivered, "amq.topic", "a.b.c", RAW, payload
    )
    expected = pamqp_frame.marshal(
        commands.Basic.Deliver("ctag-1", 2**40 + 7, redelivered, "amq.topic", "a.b.c"), 1
    ) + pamqp_content(1, payload, 131072)
    assert sent(running) == expected


def test_deliver_uses_the_negotiated_frame_max(make_driver):
    driver = make_driver().handshake(frame_max=4096)
    driver.open_channel(3)
    payload = b"z" * 10_000
    driver.conn.send_deliver(3, b"c", 1, False, "", "q", RAW, payload)
    frames = [frame for _, frame in driver.output()]
    assert [frame.name for frame in frames] == ["Basic.Deliver", "ContentHeader"] + [
        "ContentBody"
    ] * 3
    assert [len(frame.value) for frame in frames[2:]] == [4088, 4088, 1824]


def test_deliver_decodes_with_pamqp_for_any_names(running):
    exchange, key, tag = "\u00fcber-ex" * 10, "k\u00e9y." * 40, "consumer \u2603"
    running.conn.send_deliver(1, tag, 1, True, exchange, key, b"\x00\x00", b"body")
    (_, deliver), (_, content_header), (_, content) = running.output()
    assert dict(deliver) == {
        "consumer_tag": tag,
        "delivery_tag": 1,
        "redelivered": True,
        "exchange": exchange,
        "routing_key": key,
    }
    assert content_header.body_size == 4
    assert content.value == b"body"


def test_consumer_tag_as_bytes_or_str_gives_the_same_frames(running):
    running.conn.send_deliver(1, "tag", 5, False, "", "q", RAW, b"x")
    as_str = sent(running)
    running.conn.send_deliver(1, b"tag", 5, False, "", "q", RAW, b"x")
    assert sent(running) == as_str


def test_deliver_heads_are_forgotten_with_the_channel(running):
    running.conn.send_deliver(1, "a", 1, False, "", "q", RAW, b"x")
    running.conn.send_deliver(1, "b", 2, False, "", "q", RAW, b"x")
    running.conn.forget_consumer(1, "a")
    assert set(running.conn._deliver_heads) == {(1, "b")}
    running.send(1, commands.Channel.Close(200, "", 0, 0))
    running.events()
    assert running.conn._deliver_heads == {}


@pytest.mark.parametrize("size", [0, 5, 200_000])
def test_get_ok_is_byte_identical_to_pamqp(running, size):
    payload = b"g" * size
    running.conn.send_get_ok(1, 99, True, "ex", "rk", 12345, RAW, payload)
    expected = pamqp_frame.marshal(
        commands.Basic.GetOk(99, True, "ex", "rk", 12345), 1
    ) + pamqp_content(1, payload, 131072)
    assert sent(running) == expected


@pytest.mark.parametrize("size", [0, 5, 200_000])
def test_return_is_byte_identical_to_pamqp(running, size):
    payload = b"r" * size
    running.conn.send_return(1, 312, "NO_ROUTE", "ex", "rk", RAW, payload)
    expected = pamqp_frame.marshal(
        commands.Basic.Return(312, "NO_ROUTE", "ex", "rk"), 1
    ) + pamqp_content(1, payload, 131072)
    assert sent(running) == expected


@pytest.mark.parametrize(
    "method",
    [
        commands.Basic.Ack(1),
        commands.Basic.Ack(2**63 - 1, multiple=True),
        commands.Basic.Nack(5),
        commands.Basic.Nack(6, multiple=True, requeue=False),
        commands.Basic.Nack(7, multiple=False, requeue=True),
        commands.Basic.ConsumeOk("c"),
        commands.Basic.Cancel("c"),
    ],
)
def test_confirms_and_other_methods_are_byte_identical(running, method):
    running.conn.send_method(1, method)
    assert sent(running) == pamqp_frame.marshal(method, 1)


@pytest.mark.parametrize(
    "method",
    [
        commands.Basic.Ack(1),
        commands.Basic.Ack(2**63 - 1, multiple=True),
        commands.Basic.Nack(5, multiple=True, requeue=False),
        commands.Basic.Nack(6, multiple=False, requeue=True),
        commands.Basic.Reject(7, requeue=False),
        commands.Basic.Reject(8, requeue=True),
    ],
)
def test_inbound_ack_fast_path_equals_pamqp(method):
    encoded = pamqp_frame.marshal(method, 1)
    ours = codec.decode_ack(bytearray(encoded), 7, len(encoded) - 1)
    _, _, theirs = pamqp_frame.unmarshal(encoded)
    assert type(ours) is type(theirs)
    assert dict(ours) == dict(theirs)


def test_long_return_text_is_capped(running):
    running.conn.send_return(1, 312, "NO_ROUTE - " + "x" * 400, "", "q", RAW, b"")
    (_, returned), _ = running.output()
    assert len(returned.reply_text) == 255
    assert returned.reply_text.endswith("...")


def test_delivery_tags_are_unsigned_64_bit():
    """AMQP longlong is unsigned; pamqp reads it signed.  Ours is right above 2**63."""
    encoded = bytearray(b"\x01\x00\x01\x00\x00\x00\x0d\x00\x3c\x00\x50" + b"\xff" * 8 + b"\x01\xce")
    ack = codec.decode_ack(encoded, 7, len(encoded) - 1)
    assert isinstance(ack, commands.Basic.Ack)
    assert (ack.delivery_tag, ack.multiple) == (2**64 - 1, True)
