"""The asyncio adapter for AMQP connections: moves bytes, owns timers, nothing else.

Each TCP connection gets an ``AMQPConnection`` (an ``asyncio.Protocol``)
that feeds bytes to its dispatch ``Session`` and writes whatever the
protocol produced once per event-loop tick (``flush``).  Write-side
backpressure (``pause_writing``) stops deliveries to a slow consumer;
reading stops while the connection is blocked by a resource alarm.

Deliveries stop for three reasons, all ending in ``Session.resume_deliveries``: the session
queued an output slice of deliveries this turn (``flush`` writes them, then resumes them
unless the transport is over its high-water mark), the transport is over that mark (its
``resume_writing`` resumes them), or a broker-wide total is over its bound and this
connection holds a large share of it.  For buffered output its write marks are lowered to
``write_low`` (the transport pauses it at once; ``resume_writing`` restores them); for held
bodies it waits (``waiting``) until a later ``tick`` finds the total back under.  The marks,
slice and totals follow the memory watermark (``memory.delivery_budget``,
docs/isolation/memory.md).
"""

from __future__ import annotations

import asyncio
import logging
import select
import time
from collections.abc import Callable
from typing import Any, ClassVar, cast

from hutch_broker import memory
from hutch_broker.dispatch.context import NO_TRANSPORT, Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.protocol import connection as proto_connection
from hutch_broker.protocol import errors, handshakes
from hutch_broker.protocol.connection import ConnectionState
from hutch_broker.server import tlsinfo

log = logging.getLogger(__name__)

# Sockets kept open after close-ok until their clients drop them. Their sessions are gone, so no
# connection limit counts them: past this many, a client's close drops the socket at once.
MAX_AWAITING_CLIENT_CLOSE = 1024


# The peer closed or reset its socket; POLLRDHUP sees a close even with unread bytes before it.
_PEER_GONE = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR


def _peer_gone(transport: asyncio.Transport) -> bool:
    """Has the client closed or reset the socket? For a socket the loop is not reading."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), _PEER_GONE)
    return bool(poller.poll(0))


class AMQPConnection(asyncio.Protocol):
    awaiting_client_close_count: ClassVar[int] = 0  # in this process, see the constant above
    # Bytes read from all clients since the server last sampled memory: half-sent bodies
    # never become publishes, so counting published bodies alone let them past the alarm.
    received_bytes: ClassVar[int] = 0

    def __init__(
        self,
        context: Context,
        protocol_options: dict[str, Any],
        *,
        on_lost: Callable[[AMQPConnection], None] = lambda connection: None,
        handshake: handshakes.Handshake | None = None,
    ) -> None:
        """``handshake``: a socket a listener process handed over after connection.open
        (server/handover.py); the connection goes on from that record."""
        self.context = context
        self._handshake = handshake
        self._on_lost = on_lost
        self.protocol_options = protocol_options
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        self.last_received = time.monotonic()
        self.last_sent = self.last_received
        self.opened_at = self.last_received
        self.closing_since: float | None = None  # when the broker sent connection.close
        self._counted_awaiting = False  # counted in awaiting_client_close_count
        self.write_paused = False  # the transport is over its high-water mark
        self._budget: memory.DeliveryBudget | None = None  # the one this connection follows
        self._buffered = 0  # its transport's buffer and held bodies, as last added to the
        self._held = 0  # context's delivery_totals
        self.waiting = False  # stopped until the broker-wide held total is back under its bound
        self.lowered = False  # write marks lowered for the broker-wide output total

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # TCP only (uvloop has its own class)
        self.transport = transport
        budget = self._budget = self._current_budget()
        transport.set_write_buffer_limits(high=budget.write_high, low=budget.write_low)
        peer = transport.get_extra_info("peername") or ("", 0)
        local = transport.get_extra_info("sockname") or ("", 0)
        handshake, self._handshake = self._handshake, None
        proto = proto_connection.Connection(**self.protocol_options, handshake=handshake)
        self.session = Session(
            self.context, proto, peer_host=peer[0], peer_port=peer[1], transport=self,
            local_address=f"{local[0]}:{local[1]}",
            tls=tlsinfo.describe(transport.get_extra_info("ssl_object")),
        )  # fmt: skip
        if handshake is not None:
            # The handshake's events and the leftover bytes, as if they had just been read.
            self.data_received(b"")

    def data_received(self, data: bytes) -> None:
        self.last_received = time.monotonic()
        AMQPConnection.received_bytes += len(data)
        session = self.session
        if session is None:
            return
        try:
            session.handle_data(data)
        except errors.BadProtocolHeaderError:
            self.flush()
            self.close_transport()
        except Exception:
            log.exception("internal error on connection %s", session.id)
            session.fail_connection(errors.internal_error("internal error"))
            self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        """Release everything, and every reference back to this object.

        The session, its transport (this object) and the asyncio transport point at each
        other; left as cycles, a churn of connections fed the cycle collector tens of
        thousands of objects at once (45-140 ms pauses). Cut, they go by reference counting.
        """
        session = self.session
        if session is not None:
            session.connection_lost()
            session.proto.lost()
            session.transport = NO_TRANSPORT
        totals = self.context.delivery_totals
        totals.output -= self._buffered
        totals.held -= self._held
        self._buffered = self._held = 0
        if self._counted_awaiting:
            self._counted_awaiting = False
            AMQPConnection.awaiting_client_close_count -= 1
        self.transport = None
        self._on_lost(self)
        self.context.request_flush()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.session is not None:
            self.session.writable = False

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.lowered and self.transport is not None and self._budget is not None:
            self.lowered = False
            budget = self._budget
            self.transport.set_write_buffer_limits(high=budget.write_high, low=budget.write_low)
        session = self.session
        if session is None:
            return
        if session.output_pending < session.output_slice and not self.waiting:
            session.writable = True
            session.resume_deliveries(self.context.clock())
        self.context.request_flush()

    # -- delivery budget (memory.DeliveryBudget) ----------------------------

    def _current_budget(self) -> memory.DeliveryBudget:
        """The context's budget, re-derived when the watermark changed (MEM-7)."""
        context = self.context
        limit = getattr(context.alarms, "mem_limit", 0)
        if limit != context.delivery_budget.mem_limit:
            context.delivery_budget = memory.delivery_budget(limit)
        return context.delivery_budget

    def _report(self, session: Session, transport: asyncio.Transport) -> None:
        """Update this connection's share of the broker-wide totals and obey them."""
        totals = self.context.delivery_totals
        buffered = transport.get_write_buffer_size()
        held = session.held_bytes
        totals.output += buffered - self._buffered
        totals.held += held - self._held
        self._buffered, self._held = buffered, held
        budget = self.context.delivery_budget
        if not self.lowered and memory.output_must_wait(budget, totals, output=buffered):
            self.lowered = True  # over the lowered mark: the transport pauses it at once
            transport.set_write_buffer_limits(high=budget.write_low, low=budget.write_low // 4)
        self.waiting = memory.held_must_wait(budget, totals, held=held)

    def _resume_if_allowed(self, session: Session, transport: asyncio.Transport) -> None:
        """After a write or a timer tick: deliveries go on unless the socket or the totals say
        wait (the socket's ``resume_writing`` or a later tick lets them go then)."""
        self._report(session, transport)
        if session.writable or self.write_paused or self.waiting:
            return
        session.writable = True
        session.resume_deliveries(self.context.clock())

    def _follow_budget(self, session: Session, transport: asyncio.Transport) -> None:
        budget = self._current_budget()
        if budget is self._budget:
            return
        self._budget = budget
        self.lowered = False
        session.output_slice = budget.output_slice
        session.held_budget = budget.held_per_connection
        transport.set_write_buffer_limits(high=budget.write_high, low=budget.write_low)

    # -- output -------------------------------------------------------------

    def flush(self) -> None:
        session, transport = self.session, self.transport
        if session is None or transport is None or transport.is_closing():
            return
        data = session.proto.data_to_send()
        if data:
            transport.writelines(data)
            self.last_sent = time.monotonic()
        session.output_pending = 0
        if not session.writable:
            # Stopped by its output slice, now written: the next slice, in a later turn.
            self._resume_if_allowed(session, transport)
        proto = session.proto
        if proto.closed_by_client:
            self._await_client_close()
        elif proto.closed or proto.framing_lost:  # after a 501 no close-ok can be read
            transport.close()
        elif self.closing_since is None and proto.state is ConnectionState.CLOSING:
            self.closing_since = time.monotonic()

    @property
    def awaiting_client_close(self) -> bool:
        """Its session is over but the socket is open until the client drops it: the server's
        timer must keep calling ``tick``, which bounds the wait."""
        session = self.session
        return session is not None and session.proto.closed_by_client and self.transport is not None

    def _await_client_close(self) -> None:
        """close-ok went out for the client's connection.close: keep reading (the protocol
        discards it all) until the client drops the socket, as RabbitMQ does. Dropping it
        first, with client bytes unread, resets the connection; ``tick`` bounds the wait."""
        if self.closing_since is not None:
            return
        if AMQPConnection.awaiting_client_close_count >= MAX_AWAITING_CLIENT_CLOSE:
            self.close_transport()
            return
        AMQPConnection.awaiting_client_close_count += 1
        self._counted_awaiting = True
        self.closing_since = time.monotonic()
        self.resume_reading()  # a throttled publisher's socket too: its session is gone

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def close_transport(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # -- timers (called about once a second by the server) -------------------

    def tick(self, now: float, handshake_timeout: float, closing_timeout: float = 30.0) -> None:
        session = self.session
        if session is None or self.transport is None or self.transport.is_closing():
            return
        if (session.blocked or session.throttled or session.parked) and _peer_gone(self.transport):
            # Not read on purpose, so the event loop cannot see the client leave. A client
            # blocked by the memory alarm with half-sent messages would otherwise hold their
            # memory, and the alarm, until a heartbeat write failed: never, with heartbeats off.
            log.info("connection %s: the client left while it was not read, closing", session.id)
            self.transport.abort()
            return
        self._follow_budget(session, self.transport)
        self._resume_if_allowed(session, self.transport)  # the totals are refreshed here too
        proto = session.proto
        if proto.closed_by_client:
            # close-ok sent; the client has not dropped the socket. RabbitMQ waits its heartbeat
            # timeout when that is shorter than the closing timeout.
            bound = proto.heartbeat if 0 < proto.heartbeat < closing_timeout else closing_timeout
            if self.closing_since is not None and now - self.closing_since > bound:
                log.info("connection %s kept its socket after close-ok, closing it", session.id)
                self.close_transport()
            return
        if self.closing_since is not None and now - self.closing_since > closing_timeout:
            # The broker sent connection.close and no close-ok came: RabbitMQ also drops
            # the socket after its 30 s closing timeout, heartbeats or not.
            log.info("no close-ok from connection %s, closing its socket", session.id)
            self.close_transport()
            return
        if session.vhost is None:
            if now - self.opened_at > handshake_timeout:
                log.info("handshake timeout for %s", session.peer_host)
                self.close_transport()
            return
        interval = proto.heartbeat
        if not interval:
            return
        # Blocked or parked (a publish routed over later turns), it is not read on purpose.
        if now - self.last_received > 2 * interval and not session.blocked and not session.parked:
            log.info("missed heartbeats from connection %s, closing", session.id)
            self.close_transport()
            return
        if now - self.last_sent >= interval / 2:
            proto.send_heartbeat()
            self.flush()
