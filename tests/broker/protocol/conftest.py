"""In-memory client side for the protocol tests: pamqp is the independent oracle.

The driver encodes client frames with pamqp, feeds them to our ``Connection`` and decodes what the
connection wants to send with pamqp again, so every test checks our codec against another one.
No sockets, no event loop.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hutch_broker.protocol import codec, connection, errors, events
from pamqp import base, body, commands, encode, header
from pamqp import frame as pamqp_frame

AnyEvent = events.Event  # the Driver's events() method shadows the module in its class body

SERVER_PROPERTIES: dict[str, Any] = {
    "product": "Hutch",
    "version": "0.1.0",
    "platform": "Python",
    "cluster_name": "test",
    "capabilities": {"publisher_confirms": True, "basic.nack": True},
}


def method_frame(channel: int, method: base.Frame) -> bytes:
    return pamqp_frame.marshal(method, channel)


def content_frames(
    channel: int,
    payload: bytes,
    properties: commands.Basic.Properties | None = None,
    frame_max: int = 131072,
) -> bytes:
    """Content header + body frames split at frame_max - 8, as a client would send them."""
    parts = [pamqp_frame.marshal(header.ContentHeader(0, len(payload), properties), channel)]
    chunk = frame_max - 8
    for offset in range(0, len(payload), chunk):
        parts.append(
            pamqp_frame.marshal(body.ContentBody(payload[offset : offset + chunk]), channel)
        )
    return b"".join(parts)


def publish_frames(
    channel: int,
    payload: bytes,
    *,
    exchange: str = "",
    routing_key: str = "rk",
    mandatory: bool = False,
    properties: commands.Basic.Properties | None = None,
    frame_max: int = 131072,
) -> bytes:
    publish = commands.Basic.Publish(
        exchange=exchange, routing_key=routing_key, mandatory=mandatory
    )
    return method_frame(channel, publish) + content_frames(channel, payload, properties, frame_max)


def start_ok_frame(
    mechanism: str, response: str | bytes, client_properties: dict[str, Any]
) -> bytes:
    """connection.start-ok by hand: pamqp refuses to encode a non-str (binary) response."""
    raw = response.encode() if isinstance(response, str) else response
    payload = (
        struct.pack(">I", commands.Connection.StartOk.index)
        + encode.field_table(client_properties)
        + encode.short_string(mechanism)
        + struct.pack(">I", len(raw))
        + raw
        + encode.short_string("en_US")
    )
    return struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce"


def decode_all(data: bytes) -> list[tuple[int, Any]]:
    """Every frame in ``data`` through pamqp: (channel, frame object)."""
    frames = []
    while data:
        consumed, channel, frame = pamqp_frame.unmarshal(data)
        frames.append((channel, frame))
        data = data[consumed:]
    return frames


class Driver:
    """A scripted client around one server ``Connection``."""

    def __init__(self, **options: Any) -> None:
        self.conn = connection.Connection(server_properties=SERVER_PROPERTIES, **options)

    def feed(self, data: bytes) -> None:
        self.conn.receive_data(data)

    def send(self, channel: int, method: base.Frame) -> None:
        self.feed(method_frame(channel, method))

    def events(self) -> list[AnyEvent]:
        """Drain next_event until NEED_DATA (errors propagate)."""
        found: list[AnyEvent] = []
        while True:
            event = self.conn.next_event()
            if event is connection.NEED_DATA:
                return found
            found.append(event)

    def event(self) -> AnyEvent:
        (only,) = self.events()
        return only

    def answered_events(self) -> list[Any]:
        """Drain next_event until NEED_DATA, answering each error as dispatch answers it.

        A soft error closes its channel and a hard one the connection, and each is recorded in
        its place among the events (a hard one with its class and method ids), so two ways of
        reading the same bytes compare whole: the repeat and fast-path tests' oracle.
        """
        seen: list[Any] = []
        while True:
            try:
                event = self.conn.next_event()
            except errors.SoftError as exc:
                seen.append(("soft", exc.channel, exc.reply_code, exc.reply_text))
                self.conn.close_channel(exc.channel, exc)
                continue
            except errors.HardError as exc:
                seen.append(("hard", exc.reply_code, exc.reply_text, exc.class_id, exc.method_id))
                self.conn.close(exc)
                continue
            if event is connection.NEED_DATA:
                return seen
            seen.append(event)

    def output(self) -> list[tuple[int, Any]]:
        return decode_all(b"".join(self.conn.data_to_send()))

    def output_names(self) -> list[str]:
        return [frame.name for _, frame in self.output()]

    # -- handshake steps ----------------------------------------------------------------

    def start(self) -> commands.Connection.Start:
        self.feed(codec.PROTOCOL_HEADER)
        assert self.events() == []
        ((channel, start),) = self.output()
        assert channel == 0
        assert isinstance(start, commands.Connection.Start)
        return start

    def login(self, mechanism: str = "PLAIN", response: str | bytes = "\0guest\0guest", **cp: Any):
        client_properties = cp or {"capabilities": {"authentication_failure_close": True}}
        self.feed(start_ok_frame(mechanism, response, client_properties))
        return self.event()

    def tune(self, channel_max: int = 2047, frame_max: int = 131072, heartbeat: int = 60):
        self.send(0, commands.Connection.TuneOk(channel_max, frame_max, heartbeat))
        return self.event()

    def handshake(self, *, frame_max: int = 131072, channel_max: int = 2047) -> Driver:
        self.start()
        self.login()
        self.conn.accept_login()
        self.output()
        self.tune(channel_max=channel_max, frame_max=frame_max)
        self.send(0, commands.Connection.Open("/"))
        assert self.event() == events.OpenReceived(virtual_host="/")
        self.conn.accept_open()
        assert self.output_names() == ["Connection.OpenOk"]
        return self

    def open_channel(self, number: int = 1) -> None:
        self.send(number, commands.Channel.Open())
        assert self.event() == events.ChannelOpened(channel=number)
        assert self.output_names() == ["Channel.OpenOk"]


@pytest.fixture
def driver() -> Driver:
    """A connection that has seen nothing yet."""
    return Driver()


@pytest.fixture
def running() -> Driver:
    """A connection after the full handshake, channel 1 open, output drained."""
    conn = Driver().handshake()
    conn.open_channel(1)
    return conn


@pytest.fixture
def make_driver():
    """Factory for drivers with other limits (frame_max, channel_max, max_body_size...)."""
    return Driver


@pytest.fixture
def frames():
    """The frame builders, for tests (tests cannot import conftest under importlib mode)."""

    class Frames:
        method = staticmethod(method_frame)
        content = staticmethod(content_frames)
        publish = staticmethod(publish_frames)
        decode = staticmethod(decode_all)

    return Frames
