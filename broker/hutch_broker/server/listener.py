"""The listener process of a broker with vhost workers: handshakes up to connection.open.

It accepts AMQP connections, runs the handshake with the same sans-I/O ``Connection`` as a
broker does (header, start, start-ok, tune, tune-ok, open), and at connection.open puts the
socket and the handshake's record in the queue of the worker that owns the vhost
(server/workerlink.py, which writes it to the worker without ever blocking this loop). It
refuses bad credentials itself, right after start-ok and before tune, as RabbitMQ does; the
worker checks them again and alone decides the vhost, the permission and the limits
(protocol/handshakes.py says why). It holds no queue, exchange or message: its only model is the
users it checks at start-ok (``users``, a ``model.broker.Broker`` used for nothing else).

Which worker owns a vhost is ``worker_for``: a fixed function of the name, the same in every
process and every restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Sequence
from typing import Any, cast

from hutch_broker.model import access
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_broker.protocol import errors, events, handshakes
from hutch_broker.server import workerlink

log = logging.getLogger(__name__)


def worker_for(vhost: str, workers: int) -> int:
    """The worker that owns ``vhost``, from 0: CRC-32 of its UTF-8 name, modulo ``workers``
    (Python's own ``hash`` differs between processes)."""
    return zlib.crc32(vhost.encode("utf-8", "surrogatepass")) % workers


class Handshaking(asyncio.Protocol):
    """One client connection until its connection.open: then it belongs to a worker."""

    def __init__(
        self,
        protocol_options: dict[str, Any],
        users: Broker,
        workers: Sequence[workerlink.WorkerLink],
    ) -> None:
        self.proto = proto_connection.Connection(**protocol_options)
        self._users = users
        self._workers = workers
        self.transport: asyncio.Transport | None = None
        self.peer_host = ""
        self.username = ""
        self.opened_at = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer_host = (transport.get_extra_info("peername") or ("", 0))[0]

    def data_received(self, data: bytes) -> None:
        proto = self.proto
        proto.receive_data(data)
        while True:
            try:
                event = proto.next_event()
                if event is proto_connection.NEED_DATA:
                    break
                self._handle(event)
            except errors.BadProtocolHeaderError:
                self._flush()
                self.close()
                return
            except errors.AMQPError as exc:
                proto.close(exc)
            if self.transport is None:  # handed over
                return
        self._flush()

    def _handle(self, event: events.Event) -> None:
        if isinstance(event, events.StartOkReceived):
            user = self._users.authenticate(event.username, event.password)
            if (
                user is not None
                and user.name in self._users.loopback_users
                and not access.is_loopback(self.peer_host)
            ):
                user = None
            if user is None:
                log.warning("login refused for user %r from %s", event.username, self.peer_host)
                raise errors.login_refused(event.mechanism)
            self.username = event.username
            self.proto.accept_login()
        elif isinstance(event, events.OpenReceived):
            self._hand_over(event.virtual_host)

    def _hand_over(self, vhost: str) -> None:
        """Into the vhost's worker's queue; if it is full, RabbitMQ's answer for a vhost that
        is down (``workerlink.vhost_down``), and the client's socket stays this process's."""
        transport = self.transport
        assert transport is not None  # noqa: S101 - events come only from data_received
        link = self._workers[worker_for(vhost, len(self._workers))]
        record = handshakes.encode(self.proto.handshake_record())
        sock = transport.get_extra_info("socket")
        try:
            link.submit(
                sock.fileno(), record, vhost=vhost, user=self.username, now=time.monotonic()
            )
        except (workerlink.QueueFullError, OSError) as exc:
            log.error("vhost worker %d cannot take a connection for %r: %s", link.index, vhost, exc)
            raise workerlink.vhost_down(vhost, self.username) from exc
        self.proto.lost()
        self.transport = None
        transport.abort()  # closes this process's descriptor only: no shutdown, no close frame

    def _flush(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        data = self.proto.data_to_send()
        if data:
            transport.writelines(data)
        if self.proto.closed or self.proto.framing_lost:
            transport.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.proto.lost()
        self.transport = None


class Listener:
    """The listening socket and its connections' handshake timeout."""

    def __init__(
        self,
        protocol_options: dict[str, Any],
        users: Broker,
        workers: Sequence[workerlink.WorkerLink],
        *,
        handshake_timeout_s: float = 10.0,
    ) -> None:
        self._options = protocol_options
        self._users = users
        self._workers = workers
        self._timeout = handshake_timeout_s
        self.handshaking: set[Handshaking] = set()
        self._server: asyncio.AbstractServer | None = None

    def _factory(self) -> Handshaking:
        connection = Handshaking(self._options, self._users, self._workers)
        self.handshaking.add(connection)
        return connection

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._factory, host, port, reuse_address=True, backlog=1024
        )
        log.info("AMQP listener on %s:%d, handing connections to %d vhost workers",
                 host, port, len(self._workers))  # fmt: skip

    @property
    def port(self) -> int:
        """The port it listens on (the one asked for, or the kernel's pick for 0)."""
        assert isinstance(self._server, asyncio.Server)  # noqa: S101 - after start()
        return int(self._server.sockets[0].getsockname()[1])

    def tick(self, now: float) -> None:
        """Drop connections that are handed over or gone, close those past the timeout, and
        refuse those that waited in a worker's queue longer than it: to their client, the
        handshake has not ended before open-ok."""
        for link in self._workers:
            link.expire(now, self._timeout)
        for connection in list(self.handshaking):
            if connection.transport is None:
                self.handshaking.discard(connection)
            elif now - connection.opened_at > self._timeout:
                log.info("handshake timeout for %s", connection.peer_host)
                connection.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.handshaking):
            connection.close()
