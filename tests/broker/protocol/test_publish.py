"""Content assembly: basic.publish + header + bodies -> PublishReceived (CN-4, IMPL-1, IMPL-4)."""

from __future__ import annotations

import random
import struct

import pytest
from hutch_broker.protocol import errors, events
from pamqp import commands, header
from pamqp import frame as pamqp_frame

PROPS = commands.Basic.Properties(
    content_type="application/json",
    headers={"x-id": 42, "nested": {"a": [1, "two"]}},
    delivery_mode=2,
    expiration="60000",
)


def test_single_frame_publish(running, frames):
    running.feed(
        frames.publish(1, b"hello", exchange="amq.topic", routing_key="a.b", properties=PROPS)
    )
    event = running.event()
    assert event == events.PublishReceived(
        channel=1,
        exchange="amq.topic",
        routing_key="a.b",
        mandatory=False,
        raw_properties=PROPS.marshal(),
        body=b"hello",
    )
    assert running.output() == []


def test_raw_properties_are_the_publishers_bytes(running, frames):
    """IMPL-1: an ``l`` header stays ``l`` (pamqp would re-encode 1 as ``b``)."""
    table = b"\x01n" + b"l" + struct.pack(">q", 1)
    raw = struct.pack(">H", 0x2000) + struct.pack(">I", len(table)) + table
    content_header = struct.pack(">HHQ", 60, 0, 1) + raw
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q")))
    running.feed(struct.pack(">BHI", 2, 1, len(content_header)) + content_header + b"\xce")
    running.feed(struct.pack(">BHI", 3, 1, 1) + b"x\xce")
    assert running.event().raw_properties == raw


def test_mandatory_flag(running, frames):
    running.feed(frames.publish(1, b"m", mandatory=True))
    assert running.event().mandatory is True


def test_zero_length_body_has_no_body_frames(running, frames):
    running.feed(frames.publish(1, b""))
    event = running.event()
    assert isinstance(event, events.PublishReceived)
    assert event.body == b""
    running.feed(frames.publish(1, b"next"))
    assert running.event().body == b"next"


@pytest.mark.parametrize("size", [4088, 4089, 3 * 4088, 3 * 4088 + 1, 100_000])
def test_multi_frame_bodies(make_driver, frames, size):
    driver = make_driver().handshake(frame_max=4096)
    driver.open_channel(1)
    body = random.Random(size).randbytes(size)
    data = frames.publish(1, body, frame_max=4096)
    assert data.count(b"\xce\x03\x00\x01") >= size // 4088  # really several body frames
    driver.feed(data)
    assert driver.event().body == body


def test_empty_body_frames_are_allowed_in_between(running, frames):
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q")))
    running.feed(pamqp_frame.marshal(header.ContentHeader(0, 4), 1))
    for piece in (b"ab", b"", b"cd"):
        running.feed(struct.pack(">BHI", 3, 1, len(piece)) + piece + b"\xce")
    assert running.event().body == b"abcd"


def test_publish_assembly_at_every_split_point(running, frames):
    stream = (
        frames.publish(1, b"first", exchange="e", routing_key="k1", properties=PROPS)
        + frames.publish(1, b"", routing_key="k2")
        + frames.method(1, commands.Basic.Ack(3))
        + frames.publish(1, b"third" * 30, routing_key="k3")
    )
    expected = ["k1", "k2", "ack", "k3"]
    for split in range(1, len(stream)):
        running.feed(stream[:split])
        seen = running.events()
        running.feed(stream[split:])
        seen += running.events()
        assert [getattr(e, "routing_key", "ack") for e in seen] == expected, split


def test_publish_assembly_with_random_chunking(running, frames):
    rng = random.Random(1234)
    bodies = [rng.randbytes(rng.randrange(0, 3000)) for _ in range(50)]
    stream = b"".join(frames.publish(1, body, frame_max=1024) for body in bodies)
    received = []
    pos = 0
    while pos < len(stream):
        step = rng.randrange(1, 700)
        running.feed(stream[pos : pos + step])
        pos += step
        received += [event.body for event in running.events()]
    assert received == bodies


def test_publish_one_byte_at_a_time(running, frames):
    stream = frames.publish(1, b"x" * 300, properties=PROPS, frame_max=4096) * 2
    seen = []
    for byte in stream:
        running.feed(bytes([byte]))
        seen += running.events()
    assert [event.body for event in seen] == [b"x" * 300] * 2


def test_longest_names(running, frames):
    """255-byte short strings (pamqp itself stops at 127 for exchange names)."""
    name = "e" * 255
    key = "\u00e9" * 127  # 254 bytes of UTF-8
    payload = (
        struct.pack(">HHH", 60, 40, 0)
        + bytes([255])
        + name.encode()
        + bytes([254])
        + key.encode()
        + b"\x00"
    )
    running.feed(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    running.feed(frames.content(1, b"x"))
    event = running.event()
    assert (event.exchange, event.routing_key) == (name, key)


def test_cn_4_oversized_body_is_406_on_its_channel(running, frames):
    too_big = 16 * 1024 * 1024 + 1
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q")))
    running.feed(pamqp_frame.marshal(header.ContentHeader(0, too_big), 1))
    with pytest.raises(errors.SoftError) as caught:
        running.events()
    assert caught.value.channel == 1
    assert caught.value.reply_code == 406
    assert caught.value.reply_text == (
        f"PRECONDITION_FAILED - message size {too_big} is larger than configured max size 16777216"
    )
    assert (caught.value.class_id, caught.value.method_id) == (60, 40)
    # Dispatch closes the channel; the body frames still in flight are discarded.
    running.conn.close_channel(1, caught.value)
    assert running.output_names() == ["Channel.Close"]
    running.feed(struct.pack(">BHI", 3, 1, 1000) + b"y" * 1000 + b"\xce")
    running.send(1, commands.Channel.CloseOk())
    assert running.event() == events.ChannelCloseConfirmed(channel=1)


def test_max_body_size_is_configurable(make_driver, frames):
    driver = make_driver(max_body_size=10).handshake()
    driver.open_channel(1)
    driver.feed(frames.publish(1, b"0123456789"))
    assert driver.event().body == b"0123456789"
    driver.feed(frames.publish(1, b"0123456789A"))
    with pytest.raises(errors.SoftError, match="message size 11 is larger than configured max"):
        driver.events()


def test_cn_4_immediate_is_540(running, frames):
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q", immediate=True)))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 540
    assert caught.value.reply_text == "NOT_IMPLEMENTED - immediate=true"
    assert (caught.value.class_id, caught.value.method_id) == (60, 40)


def test_header_without_publish_is_505(running, frames):
    running.feed(frames.content(1, b"abc"))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 505
    assert caught.value.reply_text == (
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
    )


def test_method_instead_of_header_is_505(running, frames):
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q")))
    running.send(1, commands.Basic.Ack(1))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_text == (
        "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame "
        "instead"
    )
    assert (caught.value.class_id, caught.value.method_id) == (60, 40)


def test_channel_close_in_the_middle_of_content_is_505(running, frames):
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q")))
    running.feed(pamqp_frame.marshal(header.ContentHeader(0, 10), 1))
    running.send(1, commands.Channel.Close(200, "bye", 0, 0))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_text == (
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead"
    )


def test_header_of_another_class_is_505(running, frames):
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q")))
    running.feed(struct.pack(">BHIHHQH", 2, 1, 14, 50, 0, 0, 0) + b"\xce")
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_text == (
        "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead"
    )


def test_publishes_interleaved_on_two_channels(running, frames):
    running.open_channel(2)
    a = frames.publish(1, b"A" * 10_000, routing_key="a", frame_max=4096)
    b = frames.publish(2, b"B" * 10_000, routing_key="b", frame_max=4096)
    a_frames = frames.decode(a)
    assert len(a_frames) > 3
    # Frame-level interleaving of two channels is legal; within a channel order holds.
    interleaved = b""
    for index in range(max(len(a_frames), len(frames.decode(b)))):
        for stream in (a, b):
            decoded = [pamqp_frame.marshal(f, ch) for ch, f in frames.decode(stream)]
            if index < len(decoded):
                interleaved += decoded[index]
    running.feed(interleaved)
    seen = running.events()
    assert sorted((e.channel, e.body[:1], len(e.body)) for e in seen) == [
        (1, b"A", 10_000),
        (2, b"B", 10_000),
    ]


def test_body_longer_than_announced_is_501(running, frames):
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q")))
    running.feed(pamqp_frame.marshal(header.ContentHeader(0, 3), 1))
    running.feed(struct.pack(">BHI", 3, 1, 2) + b"ab\xce")
    running.feed(struct.pack(">BHI", 3, 1, 2) + b"cd\xce")
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">HHH", 60, 40, 0),  # no exchange
        struct.pack(">HHH", 60, 40, 0) + b"\x00",  # no routing key
        struct.pack(">HHH", 60, 40, 0) + b"\x00\x00",  # no bits
        struct.pack(">HHH", 60, 40, 0) + b"\x09abc\x00\x00",  # exchange runs past the end
        struct.pack(">HHH", 60, 40, 0) + b"\x00\x02\xff\xfe\x00",  # routing key not UTF-8
        struct.pack(">HHH", 60, 40, 0) + b"\x00\x05trail\x00!",  # a byte after the flags
    ],
)
def test_malformed_publish_is_501(running, payload):
    running.feed(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501
    assert caught.value.reply_text.startswith("FRAME_ERROR - cannot decode <<")
    assert (caught.value.class_id, caught.value.method_id) == (60, 40)


def test_a_publish_with_bytes_after_its_flags_is_501_after_the_same_publish_without(
    running, frames
):
    """As RabbitMQ 3.10.8 answers it (checked over a raw socket): 501 "cannot decode" with the
    arguments' bytes, even when the channel's last publish had the same arguments without the
    extra byte (the remembered payload must not match a prefix)."""
    running.feed(frames.publish(1, b"x", routing_key="trail") * 2)
    assert [event.body for event in running.events()] == [b"x", b"x"]
    payload = struct.pack(">HHH", 60, 40, 0) + b"\x00\x05trail\x00!"
    running.feed(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    running.feed(pamqp_frame.marshal(header.ContentHeader(0, 1), 1))
    running.feed(struct.pack(">BHI", 3, 1, 1) + b"y\xce")
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_text == (
        "FRAME_ERROR - cannot decode <<0,0,0,5,116,114,97,105,108,0,33>>"
    )
    assert (caught.value.class_id, caught.value.method_id) == (60, 40)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x80\x00\x05ab",  # content_type runs past the end
        b"\x80\x00\x02\xff\xfe",  # content_type not UTF-8
        b"\x00\x01",  # continuation flag
        b"\x00\x02",  # reserved flag
        b"\x10\x00\x02\x00",  # a byte after the last property
        b"\x00\x00xyz",  # no property flags, bytes after them (RabbitMQ: 541, it crashes)
        b"\x20\x00\x00\x00\x00\x03\x01aQ",  # unknown field type in headers
    ],
)
def test_malformed_properties_are_501(running, frames, raw):
    content_header = struct.pack(">HHQ", 60, 0, 0) + raw
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q")))
    running.feed(struct.pack(">BHI", 2, 1, len(content_header)) + content_header + b"\xce")
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501
    assert caught.value.reply_text.startswith("FRAME_ERROR - cannot decode content header")


@pytest.mark.parametrize("raw", [b"\x00\x00xyz", b"\x10\x00\x02\x00"])
def test_malformed_properties_in_a_whole_publish_are_501(running, frames, raw):
    """Method, header and body in one read take the fast path (``_publish``): the same error."""
    content_header = struct.pack(">HHQ", 60, 0, 3) + raw
    running.feed(
        frames.method(1, commands.Basic.Publish(routing_key="q"))
        + struct.pack(">BHI", 2, 1, len(content_header))
        + content_header
        + b"\xce"
        + struct.pack(">BHI", 3, 1, 3)
        + b"abc\xce"
    )
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501
    assert caught.value.reply_text.startswith("FRAME_ERROR - cannot decode content header")


def test_truncated_content_header_is_501(running, frames):
    running.feed(frames.method(1, commands.Basic.Publish(routing_key="q")))
    running.feed(struct.pack(">BHI", 2, 1, 12) + struct.pack(">HHQ", 60, 0, 0) + b"\xce")
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501
