"""A channel's remembered publish: only a byte-identical repeat may pass for the last one.

Why: ``Connection._publish`` keeps each channel's last basic.publish payload with its decoded
fields, and its last (valid) properties, and takes the next publish's as the same when the
buffer holds the same bytes at the same length (d532950, #32): no copy, no decode, no
validation. A neighbour that is the same length but not the same bytes (another exchange or
routing key, the mandatory or immediate bit, a name's length moved from one field to the other,
properties that differ or do not decode) must be read as if nothing were remembered, and so
must a repeat whose frames are split over two reads at any offset. The oracle is the same
stream read frame by frame, one frame a read, where nothing is taken whole.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hutch_broker.protocol import connection, errors
from pamqp import commands
from pamqp import frame as pamqp_frame

FRAME_MAX = 4096
CONTENT_TYPE_AB = commands.Basic.Properties(content_type="ab").marshal()  # 80 00 02 'ab'
MALFORMED_SAME_LENGTH = b"\x80\x00\x05ab"  # a shortstr of 5 with 2 bytes left: not decodable
TRANSIENT = commands.Basic.Properties(delivery_mode=1).marshal()
PERSISTENT = commands.Basic.Properties(delivery_mode=2).marshal()


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"


def publish(
    channel: int = 1,
    *,
    exchange: str = "",
    routing_key: str = "rk",
    mandatory: bool = False,
    immediate: bool = False,
) -> bytes:
    method = commands.Basic.Publish(
        exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
    )
    return pamqp_frame.marshal(method, channel)


def message(data: bytes, raw: bytes = TRANSIENT, channel: int = 1, **fields: Any) -> bytes:
    header = struct.pack(">HHQ", 60, 0, len(data)) + raw
    return publish(channel, **fields) + frame(2, channel, header) + frame(3, channel, data)


# Each stream warms the channel with a publish, then sends a neighbour of the same length.
STREAMS: dict[str, bytes] = {
    "the same publish again": message(b"1") + message(b"2") + message(b"3"),
    "another routing key of the same length": message(b"1", routing_key="qa")
    + message(b"2", routing_key="qb")
    + message(b"3", routing_key="qa"),
    "another exchange of the same length": message(b"1", exchange="amq.topic", routing_key="k")
    + message(b"2", exchange="amq.fanou", routing_key="k")
    + message(b"3", exchange="amq.topic", routing_key="k"),
    "a name's length moved to the other field": message(b"1", exchange="ab", routing_key="c")
    + message(b"2", exchange="a", routing_key="bc"),
    "mandatory only": message(b"1") + message(b"2", mandatory=True) + message(b"3"),
    "immediate only": message(b"1") + message(b"2", immediate=True) + message(b"3"),
    "mandatory then immediate": message(b"1", mandatory=True) + message(b"2", immediate=True),
    "properties of the same length, other bytes": message(b"1", TRANSIENT)
    + message(b"2", PERSISTENT)
    + message(b"3", TRANSIENT),
    "properties of the same length that do not decode": message(b"1", CONTENT_TYPE_AB)
    + message(b"2", MALFORMED_SAME_LENGTH)
    + message(b"3", CONTENT_TYPE_AB),
    "the same publish on another channel": message(b"1", channel=1, routing_key="qa")
    + message(b"2", channel=2, routing_key="qb")
    + message(b"3", channel=1, routing_key="qb")
    + message(b"4", channel=2, routing_key="qa"),
    "an empty body between repeats": message(b"1") + message(b"") + message(b"3"),
}


def frames_of(stream: bytes) -> Iterator[bytes]:
    pos = 0
    while pos < len(stream):
        size = struct.unpack_from(">I", stream, pos + 3)[0]
        yield stream[pos : pos + 8 + size]
        pos += 8 + size


def outcome(make_driver: Any, reads: list[bytes]) -> list[Any]:
    """Events, errors as dispatch answers them, output and framing state, for these reads."""
    driver = make_driver(frame_max=FRAME_MAX).handshake(frame_max=FRAME_MAX)
    driver.open_channel(1)
    driver.open_channel(2)
    seen: list[Any] = []
    for chunk in reads:
        driver.feed(chunk)
        seen.extend(driver.answered_events())
    seen.append(("output", b"".join(driver.conn.data_to_send())))
    seen.append(("state", driver.conn.state, driver.conn.framing_lost))
    return seen


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_neighbour_is_read_as_a_publish_never_seen(make_driver, name):
    stream = STREAMS[name]
    assert outcome(make_driver, [stream]) == outcome(make_driver, list(frames_of(stream)))


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_repeat_split_over_two_reads_at_every_offset(make_driver, name):
    """The cut falls in the method, the content header or the body of each message in turn."""
    stream = STREAMS[name]
    expected = outcome(make_driver, list(frames_of(stream)))
    for cut in range(1, len(stream)):
        assert outcome(make_driver, [stream[:cut], stream[cut:]]) == expected, cut


def test_what_is_remembered_is_what_decides(make_driver, monkeypatch):
    """With the connection's own memos emptied, a repeat is still taken without a decode or
    a validation (so the comparison, not a memo, took it), and a same-length neighbour is not."""
    driver = make_driver(frame_max=FRAME_MAX).handshake(frame_max=FRAME_MAX)
    driver.open_channel(1)
    # Twice: properties seen for the first time are validated the general way, which does not
    # remember them for the channel; the second publish, taken whole, does.
    driver.feed(message(b"warm", CONTENT_TYPE_AB, routing_key="qa") * 2)
    assert [event.routing_key for event in driver.events()] == ["qa", "qa"]
    decoded: list[int] = []
    validated: list[bytes] = []
    decode, remember = connection.Connection._decode_publish, connection.Connection._remember_valid
    monkeypatch.setattr(
        connection.Connection,
        "_decode_publish",
        lambda self, start, end: decoded.append(start) or decode(self, start, end),
    )
    monkeypatch.setattr(
        connection.Connection,
        "_remember_valid",
        lambda self, raw: validated.append(raw) or remember(self, raw),
    )
    driver.conn._publish_fields.clear()
    driver.conn._valid_properties.clear()
    driver.feed(message(b"again", CONTENT_TYPE_AB, routing_key="qa"))
    (event,) = driver.events()
    assert (event.routing_key, event.raw_properties, event.body) == (
        "qa",
        CONTENT_TYPE_AB,
        b"again",
    )
    assert (decoded, validated) == ([], [])
    driver.feed(message(b"other", CONTENT_TYPE_AB, routing_key="qb"))
    (event,) = driver.events()
    assert event.routing_key == "qb"
    assert len(decoded) == 1
    driver.feed(message(b"odd", MALFORMED_SAME_LENGTH, routing_key="qb"))
    with pytest.raises(errors.AMQPError):
        driver.events()
    assert validated == [MALFORMED_SAME_LENGTH]
