"""Frame layer: sizes, end octets, frame types, heartbeats, buffering (CN-3, IMPL-5)."""

from __future__ import annotations

import struct

import pytest
from hutch_broker.protocol import connection, errors, events
from pamqp import commands, header
from pamqp import frame as pamqp_frame


def raw_frame(frame_type: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([end])


def test_cn_3_bad_frame_end_is_501_and_stops_parsing(running, frames):
    good = frames.method(1, commands.Basic.Qos(prefetch_count=1))
    running.feed(good[:-1] + b"\x00" + good)
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501
    assert caught.value.reply_text.startswith("FRAME_ERROR - type 1, all octets = <<0,60,0,10,")
    assert caught.value.reply_text.endswith(": {invalid_frame_end_marker,0}")
    # Framing is lost: the good frame after the bad one is never parsed, whatever we are fed.
    assert running.conn.framing_lost
    running.feed(good)
    assert running.conn.next_event() is connection.NEED_DATA


def test_cn_3_frame_end_text_shows_first_16_octets(running):
    running.feed(raw_frame(1, 1, bytes(range(40)), end=0x41))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_text == (
        "FRAME_ERROR - type 1, first 16 octets = <<0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15>>: "
        "{invalid_frame_end_marker,65}"
    )


def test_cn_3_oversized_frame_is_501_before_its_payload_arrives(make_driver):
    driver = make_driver().handshake(frame_max=4096)
    driver.open_channel(1)
    driver.feed(struct.pack(">BHI", 3, 1, 4097))  # only the header: no need to wait for 4 KiB
    with pytest.raises(errors.HardError) as caught:
        driver.events()
    assert caught.value.reply_code == 501
    assert caught.value.reply_text == (
        "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}"
    )


def test_cn_3_payload_of_exactly_frame_max_is_tolerated(make_driver, frames):
    """RabbitMQ allows frame_max bytes of payload (its FRAME_SIZE_FUDGE): so do we."""
    driver = make_driver().handshake(frame_max=4096)
    driver.open_channel(1)
    body = b"x" * 4096
    publish = frames.method(1, commands.Basic.Publish(routing_key="q"))
    content_header = pamqp_frame.marshal(header.ContentHeader(0, len(body)), 1)
    driver.feed(publish + content_header + raw_frame(3, 1, body))
    (event,) = driver.events()
    assert isinstance(event, events.PublishReceived)
    assert event.body == body


def test_before_tune_ok_the_offered_frame_max_applies(driver):
    driver.start()
    driver.feed(struct.pack(">BHI", 1, 0, 131073))
    with pytest.raises(errors.HardError) as caught:
        driver.events()
    assert caught.value.reply_text.endswith("{frame_too_large,131073,131064}")


@pytest.mark.parametrize("channel", [0, 1])
def test_unknown_frame_type_is_501(running, channel):
    running.feed(raw_frame(9, channel, b"abc"))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501
    assert caught.value.reply_text == 'FRAME_ERROR - type 9, all octets = <<"abc">>: unknown_frame'


def test_heartbeat_on_channel_0_is_an_event(running):
    running.feed(raw_frame(8, 0, b""))
    assert running.event() == events.Heartbeat()


def test_heartbeat_during_the_handshake_is_fine(driver):
    driver.start()
    driver.feed(raw_frame(8, 0, b""))
    assert driver.event() == events.Heartbeat()


def test_heartbeat_on_another_channel_is_505(running):
    running.feed(raw_frame(8, 1, b""))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 505
    assert caught.value.reply_text == "UNEXPECTED_FRAME - type 8, all octets = <<>>"


def test_heartbeat_with_a_payload_is_501(running):
    running.feed(raw_frame(8, 0, b"\x01"))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501


@pytest.mark.parametrize("frame_type", [2, 3])
def test_content_frames_on_channel_0_are_505(running, frame_type):
    running.feed(raw_frame(frame_type, 0, b"\x00" * 14))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 505


@pytest.mark.parametrize("channel", [0, 1])
def test_method_frame_shorter_than_its_ids_is_501(running, channel):
    running.feed(raw_frame(1, channel, b"\x00\x3c"))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501
    assert caught.value.reply_text.endswith("unknown_frame")


def test_unknown_method_is_540(running):
    running.feed(raw_frame(1, 1, struct.pack(">HH", 60, 999)))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 540
    assert caught.value.reply_text == "NOT_IMPLEMENTED - unknown method class 60 method 999"


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">HH", 50, 10),  # queue.declare without any field
        struct.pack(">HHH", 50, 10, 0) + b"\x05ab",  # short string runs past the end
        struct.pack(">HHH", 50, 10, 0) + b"\x02\xff\xfe" + b"\x00" * 10,  # not UTF-8
    ],
)
def test_malformed_method_is_501_cannot_decode(running, payload):
    running.feed(raw_frame(1, 1, payload))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 501
    assert caught.value.reply_text.startswith("FRAME_ERROR - cannot decode <<")
    assert (caught.value.class_id, caught.value.method_id) == (50, 10)


def test_a_session_fed_one_byte_at_a_time(frames):
    from_client = b"".join(
        [
            b"AMQP\x00\x00\x09\x01",
            frames.method(0, commands.Connection.StartOk(mechanism="PLAIN", response="\0u\0p")),
            frames.method(0, commands.Connection.TuneOk(2047, 131072, 60)),
            frames.method(0, commands.Connection.Open("/")),
            frames.method(1, commands.Channel.Open()),
            frames.publish(1, b"hello", routing_key="a"),
            frames.method(1, commands.Basic.Ack(1)),
            frames.publish(1, b"", routing_key="b"),
            frames.method(0, commands.Connection.Close(200, "bye", 0, 0)),
        ]
    )
    conn = connection.Connection(server_properties={})
    seen = []
    for byte in from_client:
        conn.receive_data(bytes([byte]))
        while (event := conn.next_event()) is not connection.NEED_DATA:
            seen.append(type(event).__name__)
            if isinstance(event, events.StartOkReceived):
                conn.accept_login()
            elif isinstance(event, events.OpenReceived):
                conn.accept_open()
    assert seen == [
        "StartOkReceived",
        "TuneOkReceived",
        "OpenReceived",
        "ChannelOpened",
        "PublishReceived",
        "MethodReceived",
        "PublishReceived",
        "ConnectionCloseRequested",
    ]
    assert [frame.name for _, frame in frames.decode(b"".join(conn.data_to_send()))] == [
        "Connection.Start",
        "Connection.Tune",
        "Connection.OpenOk",
        "Channel.OpenOk",
        "Connection.CloseOk",
    ]


def test_receive_buffer_is_compacted(running, frames):
    """IMPL-5: consumed bytes do not pile up however the input is split."""
    message = frames.publish(1, b"x" * 1000)
    for _ in range(2000):
        running.feed(message[:500])
        running.events()
        running.feed(message[500:])
        (event,) = running.events()
        assert isinstance(event, events.PublishReceived)
    assert len(running.conn._buffer) < 2 * len(message)


def test_many_frames_in_one_chunk(running, frames):
    running.feed(b"".join(frames.publish(1, b"%d" % n) for n in range(500)))
    bodies = [event.body for event in running.events()]
    assert bodies == [b"%d" % n for n in range(500)]
