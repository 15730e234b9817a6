"""The executor's AMQP client for one stream consumer: a socket, the handshake, acks, close.

Why a client of its own: a stream read needs exactly one channel, one `basic.qos`, one
`basic.consume` and multiple acks that only return credit; everything pika adds on top (an I/O
loop, a frame object and callbacks per frame) is what an executor spent its time in
(streamframes.py). The connection parameters still come from connections.parameters, so the URI,
the credentials from the environment, TLS with `caFile` and host-name checks mean what they mean
for the rest of the source.

I/O only: parsing is streamframes.SliceParser's, and what to read and when to ack is
streamreads'. Reads are large (`RECV_BYTES`) so that one system call brings hundreds of
messages. While data flows, every ack also tells the broker the client is alive; when the
reader has sent nothing for half the heartbeat interval it sends a heartbeat frame.
"""

from __future__ import annotations

import socket
import struct
import time

import pika
import pika.exceptions
from pika import data

from hutch_spark.streamframes import FRAME_END, HEARTBEAT, METHOD, Method, SliceParser

RECV_BYTES = 1 << 18
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_MAX = 1 << 17  # what we ask for; the broker's own limit wins if lower
CHANNEL = 1

_FRAME = struct.Struct(">BHI")
_CLASS_METHOD = struct.Struct(">HH")


class BrokerClosedError(Exception):
    """The broker closed the channel or the connection: `code`, `text`, and which."""

    def __init__(self, code: int, text: str, *, connection: bool) -> None:
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text
        self.connection = connection


def frame(kind: int, channel: int, payload: bytes) -> bytes:
    """One frame with its header and end octet."""
    return _FRAME.pack(kind, channel, len(payload)) + payload + bytes((FRAME_END,))


def method(channel: int, class_id: int, method_id: int, *arguments: bytes) -> bytes:
    """A method frame whose argument bytes are already encoded."""
    return frame(METHOD, channel, _CLASS_METHOD.pack(class_id, method_id) + b"".join(arguments))


def short_string(text: str) -> bytes:
    raw = text.encode()
    return bytes((len(raw),)) + raw


def long_string(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def table(values: dict[str, object]) -> bytes:
    pieces: list[bytes] = []
    data.encode_table(pieces, values)
    return b"".join(pieces)


class StreamConnection:
    """One connection with one channel to consume a stream; see the module doc."""

    def __init__(self, params: pika.URLParameters, timeout_s: float) -> None:
        self.params = params
        self.timeout_s = timeout_s
        self.heartbeat_s = 0
        self.sock: socket.socket | None = None
        self.consumer_tag = ""
        self._last_send = time.monotonic()

    def open(self, parser: SliceParser, connection_name: str) -> None:
        """Connect, log in, open the vhost and channel 1. Raises OSError, ssl.SSLError and
        pika's connection errors as pika would, so failures.connect_failure can name them."""
        params = self.params
        raw = socket.create_connection(
            (params.host, params.port), timeout=params.socket_timeout or 10
        )
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tls = params.ssl_options
        if tls is not None:
            try:
                raw = tls.context.wrap_socket(raw, server_hostname=tls.server_hostname)
            except BaseException:
                raw.close()
                raise
        self.sock = raw
        raw.sendall(PROTOCOL_HEADER)
        try:
            self._wait(parser, 10, 10)  # connection.start
        except ConnectionError as error:
            raise pika.exceptions.IncompatibleProtocolError(str(error)) from error
        credentials = params.credentials
        response = f"\0{credentials.username}\0{credentials.password}".encode()
        client = {
            **params.client_properties,
            "connection_name": connection_name,
            # a deleted stream then ends the read at once (basic.cancel), not at readTimeoutMs
            "capabilities": {"consumer_cancel_notify": True},
        }
        self._send(
            method(
                0,
                10,
                11,
                table(client),
                short_string("PLAIN"),
                long_string(response),
                short_string("en_US"),
            )
        )
        try:
            tune = self._wait(parser, 10, 30)
        except (ConnectionError, BrokerClosedError) as error:
            raise pika.exceptions.ProbableAuthenticationError(str(error)) from error
        channel_max, frame_max, heartbeat = struct.unpack_from(">HIH", tune.payload)
        wanted = params.heartbeat or 0
        self.heartbeat_s = min(wanted, heartbeat) if wanted and heartbeat else 0
        frame_max = min(frame_max, FRAME_MAX) if frame_max else FRAME_MAX
        del channel_max  # one channel is all this client opens
        self._send(method(0, 10, 31, struct.pack(">HIH", 1, frame_max, self.heartbeat_s)))
        self._send(method(0, 10, 40, short_string(params.virtual_host), b"\x00\x00"))
        try:
            self._wait(parser, 10, 41)
        except BrokerClosedError as error:
            raise pika.exceptions.ProbableAccessDeniedError(str(error)) from error
        self._send(method(CHANNEL, 20, 10, b"\x00"))
        self._wait(parser, 20, 11)

    def consume(self, parser: SliceParser, queue: str, prefetch: int, start: int) -> None:
        """basic.qos, then basic.consume from offset `start`."""
        self._send(method(CHANNEL, 60, 10, struct.pack(">IHB", 0, prefetch, 0)))
        self._wait(parser, 60, 11)
        arguments = table({"x-stream-offset": start})
        self._send(
            method(CHANNEL, 60, 20, b"\x00\x00", short_string(queue), b"\x00", b"\x00", arguments)
        )
        ok = self._wait(parser, 60, 21)
        self.consumer_tag, _ = data.decode_short_string(ok.payload, 0)

    def ack(self, tag: int) -> None:
        """Ack every delivery through `tag`: on a stream, credit for as many more."""
        self._send(method(CHANNEL, 60, 80, struct.pack(">QB", tag, 1)))

    def read(self, parser: SliceParser) -> None:
        """One large read into `parser`; raises on a close from the broker, EOF or a timeout."""
        sock = self._socket()
        if self.heartbeat_s and time.monotonic() - self._last_send > self.heartbeat_s / 2:
            self._send(frame(HEARTBEAT, 0, b""))
        chunk = sock.recv(RECV_BYTES)
        if not chunk:
            raise ConnectionResetError("the broker closed the connection")
        parser.feed(chunk, time.time_ns() // 1000)
        self._check_closes(parser)
        parser.methods.clear()  # nothing else is for a consumer (connection.blocked, ...)

    def close(self, parser: SliceParser) -> None:
        """connection.close and a short wait for close-ok; never raises."""
        if self.sock is None:
            return
        try:
            self._send(
                method(0, 10, 50, struct.pack(">H", 200), short_string("done"), b"\x00\x00\x00\x00")
            )
            self.sock.settimeout(min(self.timeout_s, 5))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                chunk = self.sock.recv(RECV_BYTES)
                if not chunk:
                    break
                parser.feed(chunk, 0)
                if any(m.class_id == 10 and m.method_id in (50, 51) for m in parser.methods):
                    break
        except Exception:  # noqa: BLE001, S110 - closing: the read is over either way
            pass
        finally:
            self.sock.close()
            self.sock = None

    def _socket(self) -> socket.socket:
        if self.sock is None:
            raise ConnectionResetError("the connection is closed")
        return self.sock

    def _send(self, payload: bytes) -> None:
        self._socket().sendall(payload)
        self._last_send = time.monotonic()

    def _wait(self, parser: SliceParser, class_id: int, method_id: int) -> Method:
        """Read until the method (class_id, method_id) arrives; a close is BrokerClosedError."""
        sock = self._socket()
        sock.settimeout(self.timeout_s)
        while True:
            for index, found in enumerate(parser.methods):
                if (found.class_id, found.method_id) == (class_id, method_id):
                    del parser.methods[: index + 1]
                    return found
            self._check_closes(parser)
            chunk = sock.recv(RECV_BYTES)
            if not chunk:
                raise ConnectionResetError(
                    f"the broker closed the connection while we waited for method "
                    f"{class_id}.{method_id}"
                )
            parser.feed(chunk, time.time_ns() // 1000)

    def _check_closes(self, parser: SliceParser) -> None:
        for found in parser.methods:
            key = (found.class_id, found.method_id)
            if key in ((10, 50), (20, 40)):
                code = struct.unpack_from(">H", found.payload)[0]
                text, _ = data.decode_short_string(found.payload, 2)
                connection = key == (10, 50)
                try:
                    ok = method(0, 10, 51) if connection else method(found.channel, 20, 41)
                    self._send(ok)
                except OSError:
                    pass
                raise BrokerClosedError(code, str(text), connection=connection)
            if key == (60, 30):  # basic.cancel from the broker: the queue went away
                raise BrokerClosedError(
                    0,
                    "the broker cancelled the consumer (was the stream deleted?)",
                    connection=False,
                )
