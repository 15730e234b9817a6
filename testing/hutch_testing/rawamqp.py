"""A raw-socket AMQP client: frames a library would never send, and exactly what comes back.

Why: some side-by-side checks are about bytes no client library produces or shows. pika cannot
encode a timestamp past year 9999 (it goes through a datetime), and it hides whether the socket
ended with a close-ok, an end of file or a reset. These helpers do the handshake over a plain
socket (against either broker), send frames built with pamqp, and read frames one at a time.
"""

from __future__ import annotations

import socket
import struct
from typing import Any, Protocol

from pamqp import commands, frame

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"
_FRAME_END = b"\xce"


class AmqpReachable(Protocol):
    @property
    def amqp_port(self) -> int: ...

    @property
    def credentials(self) -> tuple[str, str]: ...


def read_exact(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes; EOFError when the broker closed the socket first."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(sock: socket.socket) -> Any:
    """The next frame, decoded by pamqp (a method, a content header or a body)."""
    head = read_exact(sock, 7)
    size = struct.unpack(">I", head[3:7])[0]
    rest = read_exact(sock, size + 1)
    return frame.unmarshal(head + rest)[2]


def open_connection(
    broker: AmqpReachable, *, heartbeat: int = 0, vhost: str = "/"
) -> socket.socket:
    """A raw client through the handshake on ``vhost``, with channel 1 open."""
    user, password = broker.credentials
    sock = socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=5)
    sock.sendall(PROTOCOL_HEADER)
    read_frame(sock)  # start
    start_ok = commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response=f"\0{user}\0{password}", locale="en_US"
    )
    sock.sendall(frame.marshal(start_ok, 0))
    read_frame(sock)  # tune
    sock.sendall(frame.marshal(commands.Connection.TuneOk(2047, 131072, heartbeat), 0))
    sock.sendall(frame.marshal(commands.Connection.Open(vhost), 0))
    if not isinstance(read_frame(sock), commands.Connection.OpenOk):
        raise AssertionError("the broker did not open the connection")
    sock.sendall(frame.marshal(commands.Channel.Open(), 1))
    if not isinstance(read_frame(sock), commands.Channel.OpenOk):
        raise AssertionError("the broker did not open channel 1")
    return sock


def pipelined(sock: socket.socket, methods: list[Any], sync: Any, answer: type) -> Any:
    """Send ``methods`` on channel 1 in as few writes as the socket takes, then ``sync``, and
    read to ``answer``'s frame: the broker serves a channel's methods in order, so that reply
    comes after every one before it. Methods sent with ``nowait`` have no reply to wait for, so
    thousands cost one round trip instead of one each; a channel or connection close on the way
    (a method refused) is an AssertionError."""
    sock.settimeout(120.0)  # a loaded broker may take a while over thousands of methods
    batch = 2000
    for start in range(0, len(methods), batch):
        sock.sendall(
            b"".join(frame.marshal(method, 1) for method in methods[start : start + batch])
        )
    sock.sendall(frame.marshal(sync, 1))
    while True:
        received = read_frame(sock)
        if isinstance(received, commands.Channel.Close | commands.Connection.Close):
            raise AssertionError(
                "the broker refused a pipelined method: "
                f"{received.reply_code} {received.reply_text}"
            )
        if isinstance(received, answer):
            return received


def publish_frames(routing_key: str, raw_properties: bytes, body: bytes, channel: int = 1) -> bytes:
    """basic.publish to the default exchange with the content header's properties as given
    (flags included) and one body frame."""
    method = frame.marshal(commands.Basic.Publish(exchange="", routing_key=routing_key), channel)
    header = struct.pack(">HHQ", 60, 0, len(body)) + raw_properties
    return (
        method
        + struct.pack(">BHI", 2, channel, len(header))
        + header
        + _FRAME_END
        + struct.pack(">BHI", 3, channel, len(body))
        + body
        + _FRAME_END
    )
