"""An AMQP client's first frames and a stand-in socket, for broker tests that run in memory.

The dispatch and server layers are tested without sockets where the behaviour is about
their own logic (the group commit, the closing timeout, reference cycles); these helpers
are the handshake bytes a real client sends and the few transport calls the server makes.
"""

from __future__ import annotations

import struct

from pamqp import commands, frame

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


def login_frames(user: str = "guest", password: str = "guest") -> bytes:  # noqa: S107
    """connection.start-ok with PLAIN credentials."""
    start_ok = commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response=f"\0{user}\0{password}", locale="en_US"
    )
    return frame.marshal(start_ok, 0)


def handshake_frames(vhost: str = "/", *, channels: int = 16) -> bytes:
    """Everything up to an open connection: header, start-ok, tune-ok (heartbeats off), open."""
    tune_ok = commands.Connection.TuneOk(channel_max=channels, frame_max=131072, heartbeat=0)
    return (
        PROTOCOL_HEADER
        + login_frames()
        + frame.marshal(tune_ok, 0)
        + frame.marshal(commands.Connection.Open(virtual_host=vhost), 0)
    )


def decode_frames(data: bytes) -> list[object]:
    """The methods (and content frames) in ``data``, in order.

    Each frame is cut out by its size before pamqp decodes it: cutting the rest of ``data``
    after each frame copied it every time, quadratic in its size (8 MB of deliveries in
    tests/broker/dispatch/test_stream_deliveries.py ran past pytest's timeout on a loaded
    machine)."""
    found: list[object] = []
    at = 0
    while at < len(data):
        if data.startswith(b"AMQP", at):
            size = len(PROTOCOL_HEADER)
        else:
            size = _FRAME_HEAD.unpack_from(data, at)[2] + _FRAME_HEAD.size + 1  # and frame-end
        consumed, _, value = frame.unmarshal(data[at : at + size])
        found.append(value)
        at += consumed
    return found


_FRAME_HEAD = struct.Struct(">BHI")  # type, channel, payload size


class FakeTransport:
    """What ``AMQPConnection`` calls on an asyncio transport, recording writes and closes."""

    def __init__(self) -> None:
        self.closed = False
        self.written: list[bytes] = []
        self.protocol: object | None = None  # as asyncio's transports hold their protocol

    def set_write_buffer_limits(self, **_: int) -> None: ...

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 5000) if name == "peername" else None

    def writelines(self, data: list[bytes]) -> None:
        self.written.extend(data)

    def get_write_buffer_size(self) -> int:
        return 0  # the peer reads everything at once

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...
