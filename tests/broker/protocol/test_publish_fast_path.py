"""The whole-publish fast path: a message read in one call behaves as one read frame by frame.

Why: ``Connection._publish`` takes a basic.publish, its content header and its body frames in
one call when they are all in the buffer, and leaves everything unusual to the general path.
Nothing may tell the two apart: each stream below is fed three ways (all at once, so the fast
path sees it first; one frame per read and one byte per read, so the general path does) and
must give the same events, the same errors with the same reply codes and texts, the same
output and the same framing state.  Each stream starts with a publish carrying the same
properties, so they are known valid and the fast path does not step aside for them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hutch_broker.protocol import codec, connection, events
from pamqp import commands, header
from pamqp import frame as pamqp_frame

PROPS = commands.Basic.Properties(
    content_type="application/json", headers={"x-id": 42}, delivery_mode=2, message_id="m"
)
FRAME_MAX = 4096


def method(channel: int, frame: Any) -> bytes:
    return pamqp_frame.marshal(frame, channel)


def publish(
    channel: int = 1,
    *,
    routing_key: str = "rk",
    exchange: str = "",
    mandatory: bool = False,
    immediate: bool = False,
) -> bytes:
    return method(
        channel,
        commands.Basic.Publish(
            exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
        ),
    )


def content_header(
    channel: int = 1, body_size: int = 0, class_id: int = 60, raw: bytes | None = None
) -> bytes:
    raw = PROPS.marshal() if raw is None else raw
    payload = struct.pack(">HHQ", class_id, 0, body_size) + raw
    return frame(2, channel, payload)


def body(channel: int, data: bytes, end: int = 0xCE) -> bytes:
    return frame(3, channel, data, end)


def frame(frame_type: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes((end,))


def message(data: bytes, channel: int = 1, *, split: int = FRAME_MAX - 8, **fields: Any) -> bytes:
    pieces = [data[i : i + split] for i in range(0, len(data), split)]
    return (
        publish(channel, **fields)
        + content_header(channel, len(data))
        + b"".join(body(channel, piece) for piece in pieces)
    )


HEARTBEAT = frame(8, 0, b"")
TRANSIENT = commands.Basic.Properties(delivery_mode=1).marshal()
PERSISTENT = commands.Basic.Properties(delivery_mode=2).marshal()  # the same length
WARM = message(b"warm")

STREAMS: dict[str, bytes] = {
    "one body frame": message(b"x" * 1024) * 3,
    "no body": message(b"") + message(b"after"),
    "mandatory, exchange and a UTF-8 key": message(
        b"m", exchange="amq.topic", routing_key="ключ.é", mandatory=True
    ),
    "body split at frame_max": message(bytes(range(256)) * 40),
    "body in unequal frames": publish()
    + content_header(1, 7)
    + body(1, b"ab")
    + body(1, b"")
    + body(1, b"cdefg"),
    "many routing keys (the field cache is bounded)": b"".join(
        message(b"k", routing_key=f"key-{n}") for n in range(300)
    )
    * 2,
    "no properties": publish() + content_header(1, 2, raw=b"\x00\x00") + body(1, b"np"),
    "two channels interleaved": publish(1)
    + publish(2)
    + content_header(2, 1)
    + content_header(1, 1)
    + body(1, b"1")
    + body(2, b"2"),
    "heartbeat before the header": publish() + HEARTBEAT + content_header(1, 1) + body(1, b"h"),
    "heartbeat before the body": publish() + content_header(1, 1) + HEARTBEAT + body(1, b"h"),
    "header frame end octet": publish() + content_header(1, 1)[:-1] + b"\x00" + body(1, b"e"),
    "body frame end octet": publish() + content_header(1, 1) + body(1, b"e", end=0xCD),
    "body frame above frame_max": publish()
    + content_header(1, FRAME_MAX)
    + body(1, b"b" * FRAME_MAX),
    "header frame above frame_max": publish()
    + frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00" + b"p" * FRAME_MAX)
    + body(1, b"b"),
    "body longer than announced": publish() + content_header(1, 2) + body(1, b"abc"),
    "body longer than announced in the second frame": publish()
    + content_header(1, 3)
    + body(1, b"ab")
    + body(1, b"cd"),
    "body on another channel": publish(1) + content_header(1, 1) + body(2, b"x") + body(1, b"y"),
    "header on another channel": publish(1) + content_header(2, 1) + body(1, b"x"),
    "a method before the header": publish() + method(1, commands.Basic.Ack(1)),
    "a method before the body": publish() + content_header(1, 1) + method(1, commands.Basic.Ack(1)),
    "header of class 61": publish() + content_header(1, 1, class_id=61) + body(1, b"x"),
    "body above max_body_size": publish()
    + content_header(1, 100_001)
    + body(1, b"x" * 10)
    + message(b"after"),
    "body above max_body_size, all of it sent": message(b"x" * 100_001) + message(b"after"),
    "content header too short": publish()
    + frame(2, 1, struct.pack(">HHQ", 60, 0, 0))
    + message(b"x"),
    "properties not seen before, malformed": publish()
    + content_header(1, 0, raw=b"\x80\x00\x05ab"),
    "properties not seen before, sound": publish()
    + content_header(1, 1, raw=commands.Basic.Properties(app_id="new").marshal())
    + body(1, b"n"),
    "immediate": publish(immediate=True) + content_header(1, 1) + body(1, b"i"),
    "channel.close in the middle": publish()
    + content_header(1, 2)
    + method(1, commands.Channel.Close(200, "bye", 0, 0)),
    "a header for a channel that is not open": publish(3) + content_header(3, 1),
    # Each channel keeps its last publish's method and properties to compare the next with in
    # the buffer: a neighbour of the same length must not pass for it.
    "repeats and neighbours of the same length": (
        message(b"a", routing_key="qa")
        + message(b"b", routing_key="qb")
        + message(b"c", routing_key="qa", mandatory=True)
        + b"".join(
            publish() + content_header(1, 1, raw=raw) + body(1, data)
            for raw, data in [(TRANSIENT, b"1"), (PERSISTENT, b"2"), (TRANSIENT, b"3")]
        )
        + publish(2, routing_key="qb")
        + content_header(2, 1, raw=PERSISTENT)
        + body(2, b"4")
    )
    * 2,
    "the last properties with a byte more": publish()
    + content_header(1, 1, raw=b"\x00\x00")
    + body(1, b"s")
    + publish()
    + content_header(1, 1, raw=b"\x00\x00\x00")
    + body(1, b"l"),
    # A publish taken whole makes its channel the hot one, whose next publish is tried as a
    # repeat before any frame header is read: these must each end that.
    "a repeat after a publish whose content never came": message(b"1")
    + publish()
    + HEARTBEAT  # next_event returns between the two
    + message(b"2"),
    "a repeat after its channel was closed": message(b"1")
    + method(1, commands.Channel.Close(200, "bye", 0, 0))
    + message(b"2"),
    "a repeat on a channel closed and opened again": message(b"1")
    + method(1, commands.Channel.Close(200, "bye", 0, 0))
    + method(1, commands.Channel.Open())
    + message(b"2"),
    "a repeat after a heartbeat and another channel's publish": message(b"1")
    + HEARTBEAT
    + message(b"2", channel=2)
    + message(b"3")
    + message(b"4", channel=2),
    "immediate after the same publish without it": message(b"x", routing_key="ab")
    + publish(routing_key="ab", immediate=True)
    + content_header(1, 1)
    + body(1, b"i"),
}


def frames_of(stream: bytes) -> Iterator[bytes]:
    """The stream cut at frame boundaries (by each frame's size field, sound or not)."""
    pos = 0
    while pos < len(stream):
        size = struct.unpack_from(">I", stream, pos + 3)[0]
        yield stream[pos : pos + 8 + size]
        pos += 8 + size


FEEDS: dict[str, Callable[[bytes], Iterator[bytes]]] = {
    "all at once": lambda stream: iter((stream,)),
    "frame by frame": frames_of,
    "byte by byte": lambda stream: (stream[i : i + 1] for i in range(len(stream))),
}


def outcome(
    make_running: Callable[..., Any], stream: bytes, feed: str, *, runs: bool = False
) -> list[Any]:
    """Everything observable, with errors answered as dispatch answers them; with ``runs``, a
    run of publishes (``events.PublishRun``) counted as the publishes it holds."""
    driver = make_running()
    driver.conn.publish_runs = runs
    seen: list[Any] = []
    for chunk in [WARM, *FEEDS[feed](stream)]:
        driver.feed(chunk)
        for event in driver.answered_events():
            if isinstance(event, events.PublishRun):
                seen.extend(event.message(index) for index in range(len(event.raws)))
            else:
                seen.append(event)
    seen.append(("output", b"".join(driver.conn.data_to_send())))
    seen.append(("state", driver.conn.state, driver.conn.framing_lost))
    return seen


@pytest.fixture
def make_running(make_driver):
    def running() -> Any:
        driver = make_driver(frame_max=FRAME_MAX, max_body_size=100_000).handshake(
            frame_max=FRAME_MAX
        )
        driver.open_channel(1)
        driver.open_channel(2)
        return driver

    return running


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_stream_read_at_once_behaves_as_read_frame_by_frame(make_running, name):
    stream = STREAMS[name]
    at_once = outcome(make_running, stream, "all at once")
    assert at_once == outcome(make_running, stream, "frame by frame")
    assert at_once == outcome(make_running, stream, "byte by byte")
    assert at_once == outcome(make_running, stream, "all at once", runs=True)


def test_repeats_read_as_runs_are_the_publishes_read_one_at_a_time(make_running):
    """A reader of runs gets each run's publishes, in order, at most ``RUN_MAX`` a run, and
    a publish that is not a repeat (other arguments, new properties, another channel) ends
    the run before it."""
    stream = (
        message(b"a") * 600
        + message(b"b", routing_key="other") * 3
        + message(b"c", channel=2) * 2
        + publish()
        + content_header(1, 1, raw=commands.Basic.Properties(app_id="new").marshal())
        + body(1, b"d")
        + message(b"e") * 2
    )
    driver = make_running()
    driver.conn.publish_runs = True
    driver.feed(WARM * 2 + stream)
    read = driver.events()
    sizes = [len(e.raws) if isinstance(e, events.PublishRun) else 1 for e in read]
    # The two warm-ups; 600 repeats in runs of at most RUN_MAX; other arguments: the first
    # read the general way, the two after it a run; channel 2's two, and the new properties,
    # each on its own (a run of one is a PublishReceived); the last two after the general way.
    full = connection.RUN_MAX
    assert sizes == [1, 1, full, full, 600 - 2 * full, 1, 2, 1, 1, 1, 1, 1]
    assert read[2].bodies == [b"a"] * connection.RUN_MAX
    assert outcome(make_running, stream, "all at once", runs=True) == outcome(
        make_running, stream, "byte by byte"
    )


SOUND = [
    "one body frame",
    "no body",
    "mandatory, exchange and a UTF-8 key",
    "body split at frame_max",
    "body in unequal frames",
    "many routing keys (the field cache is bounded)",
    "no properties",
]


@pytest.mark.parametrize("name", SOUND)
def test_a_whole_sound_publish_is_read_in_one_call(make_running, monkeypatch, name):
    """The fast path really takes the common publish (else the test above proves nothing)."""
    driver = make_running()
    driver.feed(WARM)
    warm = driver.events()
    monkeypatch.setattr(connection.Connection, "_rest_of_message", _not_called)
    monkeypatch.setattr(connection.Connection, "_content_header", _not_called)
    monkeypatch.setattr(connection.Connection, "_content_body", _not_called)
    driver.feed(STREAMS[name])
    events = driver.events()
    monkeypatch.undo()
    assert events == outcome(make_running, STREAMS[name], "byte by byte")[len(warm) : -2]
    assert driver.conn.receiving_content is False


def test_a_repeat_on_the_hot_channel_is_read_in_one_scan(make_running, monkeypatch):
    """After a publish taken whole, its repeats on that channel are read by one
    ``scan_publish`` call each: not even ``_publish`` runs (else the hot streams above would
    prove nothing), until a publish with other arguments goes the general way."""
    driver = make_running()
    driver.feed(WARM * 2)  # the first validates the properties, the second is taken whole
    driver.events()
    monkeypatch.setattr(connection.Connection, "_publish", _not_called)
    driver.feed(message(b"x" * 1024) * 3 + message(b"y"))
    assert [event.body for event in driver.events()] == [b"x" * 1024] * 3 + [b"y"]
    driver.feed(message(b"other", routing_key="other"))
    with pytest.raises(AssertionError, match="general content path"):
        driver.events()


def _not_called(*_: object) -> None:
    raise AssertionError("the general content path was taken")


def test_a_publish_split_across_reads_is_finished_by_the_general_path(make_running):
    driver = make_running()
    stream = message(b"y" * 100)
    driver.feed(stream[:-5])
    assert driver.events() == []
    assert driver.conn.receiving_content  # the header was taken, the body is awaited
    driver.feed(stream[-5:])
    (event,) = driver.events()
    assert event.body == b"y" * 100


def test_the_frame_header_structs_read_what_pamqp_writes():
    data = pamqp_frame.marshal(header.ContentHeader(0, 123456, PROPS), 7)
    assert codec.CONTENT_HEADER_START.unpack_from(data) == (2, 7, len(data) - 8, 60, 0, 123456)
