"""An AMQP client's first frames and a stand-in socket, for broker tests that run in memory.

The dispatch and server layers are tested without sockets where the behaviour is about
their own logic (the group commit, the closing timeout, reference cycles); these helpers
are the handshake bytes a real client sends and the few transport calls the server makes.
"""

from __future__ import annotations

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
    """The methods (and content frames) in ``data``, in order."""
    found: list[object] = []
    while data:
        consumed, _, value = frame.unmarshal(data)
        found.append(value)
        data = data[consumed:]
    return found


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
