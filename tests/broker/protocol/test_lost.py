"""A lost connection keeps nothing of what its client sent (issue 30, memory after hostile input).

A client can leave a message half-sent on every channel: a content header that promises 16 MiB,
then part of the body, then it drops the socket.  Those parts must go with the socket, whoever
still holds the ``Connection`` object (a timer's loop variable did, in the broker). Measured with
tracemalloc, so the test sees the bytes themselves, not an attribute of the implementation.
"""

from __future__ import annotations

import tracemalloc

from hutch_broker.protocol import connection, events
from pamqp import body, commands, header
from pamqp import frame as pamqp_frame

CHANNELS = 8
PART = 1024 * 1024  # sent of each channel's 16 MiB message
CHUNK = 131072 - 8


def half_sent(channel: int) -> bytes:
    """basic.publish, a header promising 16 MiB and ``PART`` bytes of body."""
    parts = [
        pamqp_frame.marshal(commands.Basic.Publish(routing_key="q"), channel),
        pamqp_frame.marshal(header.ContentHeader(0, 16 * 1024 * 1024), channel),
    ]
    for offset in range(0, PART, CHUNK):
        piece = bytes(min(CHUNK, PART - offset))
        parts.append(pamqp_frame.marshal(body.ContentBody(piece), channel))
    return b"".join(parts)


def test_lost_drops_half_sent_contents_and_buffers(make_driver):
    driver = make_driver().handshake()
    for channel in range(1, CHANNELS + 1):
        driver.open_channel(channel)
    tracemalloc.start()
    try:
        for channel in range(1, CHANNELS + 1):
            driver.feed(half_sent(channel))
            assert driver.events() == []  # still waiting for the rest of the body
        driver.send(CHANNELS + 1, commands.Channel.Open())
        assert driver.events() == [events.ChannelOpened(channel=CHANNELS + 1)]  # open-ok unsent
        driver.feed(b"\x01\x00\x01")  # and the start of a frame in the receive buffer
        assert driver.events() == []
        held, _ = tracemalloc.get_traced_memory()
        assert held >= CHANNELS * PART, "the half-sent contents are held while connected"

        driver.conn.lost()

        left, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert left < 64 * 1024, f"{left} bytes still held after the socket was lost"
    assert driver.conn.closed
    assert driver.conn.data_to_send() == []
    driver.feed(half_sent(1))  # late bytes are ignored, not buffered
    assert driver.conn.next_event() is connection.NEED_DATA


def test_lost_after_a_whole_message_changes_nothing_delivered(running, frames):
    running.feed(frames.publish(1, b"whole"))
    event = running.event()
    assert isinstance(event, events.PublishReceived)
    running.conn.lost()
    assert event.body == b"whole"  # the message already handed over is the caller's
    assert running.conn.closed
