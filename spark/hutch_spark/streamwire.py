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
reader has sent nothing for half the heartbeat interval it sends a heartbeat frame. The socket's
timeout is a system call to set, so a read sets it only when it must (`_bound`): lowered when
what is left of the read's deadline drops under it, so that a read never blocks past the
deadline, and raised again only after it ended a read early; while deliveries flow, the deadline
starts again at every read and the timeout stays as it is.

Connections are kept between tasks (`connect`, `release`): PySpark reuses its Python workers
(`spark.python.worker.reuse`), and an availableNow query reads in `maxOffsetsPerTrigger`
micro-batches, each a new task per slice. A slice read to its end closes its channel only, and
the connection waits in this worker for the next slice on the same broker, vhost, credentials
and trust; one that no longer answers (a broker restart, a heartbeat timeout) is closed and
replaced before anything is consumed, so a task never sees it. An idle connection is kept for
at most one heartbeat interval (the broker never misses two) and closed when the worker exits
(its socket at the latest, when the process ends).
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import socket
import struct
import threading
import time
from types import SimpleNamespace

import pika
import pika.exceptions
from pika import data

from hutch_spark.amqpframe import CLASS_METHOD, FRAME, FRAME_END, HEARTBEAT, METHOD
from hutch_spark.streamframes import FrameError, Method, SliceParser

log = logging.getLogger(__name__)

RECV_BYTES = 1 << 18
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_MAX = 1 << 17  # what we ask for; the broker's own limit wins if lower
CHANNEL = 1
IDLE_PER_KEY = 2  # idle connections kept per broker/vhost/user: a worker runs one task at a time
MAX_IDLE_S = 30.0  # how long an idle connection is kept, and never past one heartbeat interval


class BrokerClosedError(Exception):
    """The broker closed the channel or the connection: `code`, `text`, and which."""

    def __init__(self, code: int, text: str, *, connection: bool) -> None:
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text
        self.connection = connection


def frame(kind: int, channel: int, payload: bytes) -> bytes:
    """One frame with its header and end octet."""
    return FRAME.pack(kind, channel, len(payload)) + payload + bytes((FRAME_END,))


def method(channel: int, class_id: int, method_id: int, *arguments: bytes) -> bytes:
    """A method frame whose argument bytes are already encoded."""
    return frame(METHOD, channel, CLASS_METHOD.pack(class_id, method_id) + b"".join(arguments))


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
        self._sock_timeout = math.inf  # as last set by `_set_timeout` (not yet: unknown)
        self.consumer_tag = ""
        self._last_send = time.monotonic()
        self.idle_since = 0.0  # when it was last released into this worker's pool
        self.reused = 0  # how many reads it served after its first

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
        self.open_channel(parser)

    def open_channel(self, parser: SliceParser) -> None:
        """channel.open for channel 1 (after `open`, or again after `close_channel`)."""
        self._send(method(CHANNEL, 20, 10, b"\x00"))
        self._wait(parser, 20, 11)

    def close_channel(self, parser: SliceParser) -> None:
        """channel.close and its close-ok: the broker ends the consumer and sends nothing more
        on the channel. Deliveries still in flight land in `parser`, which is done with."""
        self._send(
            method(
                CHANNEL, 20, 40, struct.pack(">H", 200), short_string("done"), b"\x00\x00\x00\x00"
            )
        )
        self._wait(parser, 20, 41)
        self.consumer_tag = ""

    def consume(self, parser: SliceParser, queue: str, prefetch: int, start: int) -> None:
        """basic.qos and basic.consume from offset `start`, sent in one write: a broker answers
        a channel's methods in order, so the slice waits one round trip for both, not two (each
        of a micro-batch's slices starts so). A refused qos closes the channel, and the broker
        drops the consume that followed it; a refused consume fails after qos-ok, as before."""
        arguments = table({"x-stream-offset": start})
        self._send(
            method(CHANNEL, 60, 10, struct.pack(">IHB", 0, prefetch, 0))
            + method(CHANNEL, 60, 20, b"\x00\x00", short_string(queue), b"\x00", b"\x00", arguments)
        )
        self._wait(parser, 60, 11)
        ok = self._wait(parser, 60, 21)
        self.consumer_tag, _ = data.decode_short_string(ok.payload, 0)

    def ack(self, tag: int) -> None:
        """Ack every delivery through `tag`: on a stream, credit for as many more."""
        self._send(method(CHANNEL, 60, 80, struct.pack(">QB", tag, 1)))

    def read(self, parser: SliceParser, wait_s: float | None = None) -> None:
        """One large read into `parser`, blocking at most `wait_s` (what is left of the
        caller's deadline, streamreads.ReadDeadline) and never longer than the connection's
        timeout; raises on a close from the broker, EOF or a timeout."""
        sock = self._socket()
        if self.heartbeat_s and time.monotonic() - self._last_send > self.heartbeat_s / 2:
            self._send(frame(HEARTBEAT, 0, b""))
        chunk = self._bound(sock, self.timeout_s if wait_s is None else min(wait_s, self.timeout_s))
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
            self._set_timeout(min(self.timeout_s, 5))
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

    def _set_timeout(self, timeout_s: float) -> None:
        self._socket().settimeout(timeout_s)
        self._sock_timeout = timeout_s

    def _bound(self, sock: socket.socket, limit_s: float) -> bytes:
        """One `recv` that blocks at most `limit_s` and raises TimeoutError only once all of
        it has passed. The socket's timeout is lowered to `limit_s` only when it is longer (a
        read must not block past its deadline); one shorter than `limit_s`, set for an earlier
        read's nearer deadline, may end the recv early, and then it goes on for what is left."""
        if limit_s <= self._sock_timeout:
            if limit_s < self._sock_timeout:
                self._set_timeout(limit_s)
            return sock.recv(RECV_BYTES)
        started = time.monotonic()
        while True:
            try:
                return sock.recv(RECV_BYTES)
            except TimeoutError:
                left = limit_s - (time.monotonic() - started)
                if left <= 0:
                    raise
                self._set_timeout(left)

    def _wait(self, parser: SliceParser, class_id: int, method_id: int) -> Method:
        """Read until the method (class_id, method_id) arrives; a close is BrokerClosedError.
        `timeout_s` bounds the whole wait, not each read: heartbeats do not extend it."""
        sock = self._socket()
        deadline = time.monotonic() + self.timeout_s
        while True:
            for index, found in enumerate(parser.methods):
                if (found.class_id, found.method_id) == (class_id, method_id):
                    del parser.methods[: index + 1]
                    return found
            self._check_closes(parser)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"method {class_id}.{method_id} did not arrive in {self.timeout_s:g} s"
                )
            self._set_timeout(left)
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


# --- connections kept between the tasks of one Python worker (module doc) -----------------

_PoolKey = tuple[object, ...]
_idle: dict[_PoolKey, list[StreamConnection]] = {}
_idle_lock = threading.Lock()
_idle_pid = os.getpid()
_REUSE_ERRORS = (OSError, BrokerClosedError, FrameError, pika.exceptions.AMQPError)


def pool_key(params: pika.URLParameters) -> _PoolKey:
    """What a kept connection must share with a new read: broker, vhost, login and trust."""
    tls = params.ssl_options
    credentials = params.credentials
    return (
        params.host,
        params.port,
        params.virtual_host,
        credentials.username,
        credentials.password,
        params.heartbeat,
        None if tls is None else (tls.server_hostname, getattr(tls, "ca_file", None)),
    )


def connect(
    params: pika.URLParameters, timeout_s: float, parser: SliceParser, connection_name: str
) -> StreamConnection:
    """A connection with channel 1 open: a kept one of this worker for the same key if it
    still answers, else a new one (whose errors `open` raises; it is closed first)."""
    key = pool_key(params)
    while (kept := _take_idle(key)) is not None:
        kept.timeout_s = timeout_s
        probe = _discarding_parser()  # what waited on the socket is not the read's to parse
        try:
            kept.open_channel(probe)
            if probe.pending or probe.methods:
                raise FrameError("unexpected frames after channel.open-ok")
        except _REUSE_ERRORS as error:
            log.info("hutch: a kept stream connection no longer answers (%r): a new one", error)
            kept.close(probe)
            continue
        kept.reused += 1
        return kept
    connection = StreamConnection(params, timeout_s)
    try:
        connection.open(parser, connection_name)
    except BaseException:
        connection.close(parser)
        raise
    return connection


def release(connection: StreamConnection, parser: SliceParser) -> None:
    """After a slice read to its end: closes the channel and keeps the connection for the next
    task; closes the connection instead if that fails or enough are kept."""
    try:
        connection.close_channel(parser)
    except _REUSE_ERRORS as error:
        log.info("hutch: not keeping a stream connection whose channel close failed: %r", error)
        connection.close(parser)
        return
    if parser.pending:  # part of a frame after close-ok: the next parser would start mid-frame
        connection.close(parser)
        return
    connection.idle_since = time.monotonic()
    key = pool_key(connection.params)
    with _idle_lock:
        _forget_if_forked()
        kept = _idle.setdefault(key, [])
        if len(kept) < IDLE_PER_KEY:
            kept.append(connection)
            return
    connection.close(parser)


def close_idle() -> None:
    """Closes every kept connection (at the worker's exit, and for tests)."""
    with _idle_lock:
        _forget_if_forked()
        kept = [connection for group in _idle.values() for connection in group]
        _idle.clear()
    for connection in kept:
        connection.close(_discarding_parser())


def idle_count() -> int:
    """How many connections this process keeps now."""
    with _idle_lock:
        return sum(len(group) for group in _idle.values())


def _take_idle(key: _PoolKey) -> StreamConnection | None:
    """The most recently kept connection for `key`; stale ones are closed on the way."""
    now = time.monotonic()
    stale: list[StreamConnection] = []
    found = None
    with _idle_lock:
        _forget_if_forked()
        kept = _idle.get(key, [])
        while kept:
            connection = kept.pop()
            limit = min(connection.heartbeat_s or MAX_IDLE_S, MAX_IDLE_S)
            if now - connection.idle_since < limit:
                found = connection
                break
            stale.append(connection)
    for connection in stale:
        connection.close(_discarding_parser())
    return found


def _discarding_parser() -> SliceParser:
    """A parser for a connection that is only being closed: it drops every delivery."""
    done = SimpleNamespace(expected=0, done=True, slice=SimpleNamespace(end=0))
    done.accept = lambda _offset: False
    return SliceParser("", done)


def _forget_if_forked() -> None:
    """Called with the lock held: a forked child must not speak on its parent's sockets."""
    global _idle_pid  # noqa: PLW0603 - the pool is per process by design
    if os.getpid() != _idle_pid:
        for connection in [c for group in _idle.values() for c in group]:
            if connection.sock is not None:
                connection.sock.close()
                connection.sock = None
        _idle.clear()
        _idle_pid = os.getpid()


atexit.register(close_idle)
