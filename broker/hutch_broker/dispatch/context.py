"""State shared by every session of one broker process, owned by the server.

The dispatch layer is synchronous; anything that must happen "at the end of
this event-loop tick" (flushing output, the group-commit fsync, releasing
publisher confirms once their records are durable) is requested through
``request_flush`` and carried out by the server. The rule that holds replies
until their writes are durable lives in ``commits``, one object per broker.
"""

from __future__ import annotations

import collections
import itertools
import os
import time
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Protocol

from hutch_broker import memory
from hutch_broker.dispatch.commits import GroupCommit
from hutch_broker.dispatch.flow import FlowControl, Publisher
from hutch_broker.dispatch.replyto import ReplyConsumers
from hutch_broker.dispatch.turns import Turns
from hutch_broker.model import access
from hutch_broker.model.broker import Broker
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import connection as proto_connection
from hutch_broker.protocol import errors


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Stats:
    """Broker-wide counters for the management API and /metrics."""

    __slots__ = (
        "acks",
        "confirms",
        "connections_closed",
        "connections_opened",
        "deliveries",
        "delivers",
        "drops_unroutable",
        "publishes",
        "redelivers",
        "returns",
    )

    def __init__(self) -> None:
        self.publishes = 0
        self.delivers = 0  # deliver_get: every delivery and every basic.get that got one
        # deliver / deliver_no_ack / get / get_no_ack / get_empty, RabbitMQ's split of deliver_get
        self.deliveries: collections.Counter[str] = collections.Counter()
        self.drops_unroutable = 0  # unroutable and not mandatory: dropped silently
        self.acks = 0
        self.confirms = 0
        self.returns = 0
        self.redelivers = 0
        self.connections_opened = 0
        self.connections_closed = 0


class Transport(Protocol):
    """What a session needs from the socket under it (the server's ``AMQPConnection``)."""

    def flush(self) -> None:
        """Write what the protocol produced (called once per event-loop tick)."""

    def pause_reading(self) -> None:
        """Stop reading: the connection is blocked by an alarm or throttled."""

    def resume_reading(self) -> None: ...


class _NoTransport:
    """In-memory sessions (tests, tools): output stays in ``proto.data_to_send()``."""

    def flush(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


NO_TRANSPORT: Transport = _NoTransport()


@dataclass(frozen=True)
class TLSInfo:
    """What a TLS connection negotiated, in the forms RabbitMQ's management API reports them
    (``tlsv1.3``, ``aes_256_gcm``, ``CN=app,O=team``); the server fills it from the socket."""

    protocol: str
    key_exchange: str
    cipher: str
    hash: str
    peer_cert_subject: str | None = None
    peer_cert_issuer: str | None = None
    peer_cert_validity: str | None = None


class Member(Publisher, Protocol):
    """What the context, the server and the management API see of a dispatch ``Session``.

    Declared here, below ``sessions``, so that the context holding the sessions never
    imports the module that defines them (dispatch's modules import one way only).
    """

    peer_host: str | None
    peer_port: int
    connected_at_ms: int
    user: access.User | None
    vhost: VirtualHost | None
    proto: proto_connection.Connection
    transport: Transport
    local_address: str | None
    tls: TLSInfo | None
    dirty: bool
    blocked: bool

    @property
    def channels(self) -> Sized: ...

    def belongs_to(self, *, vhost: str | None = None, user: str | None = None) -> bool: ...

    def use_permission(self, permission: access.Permission) -> None: ...

    def unblock(self) -> None: ...

    def fail_connection(self, exc: errors.AMQPError) -> None: ...

    def force_close(self, reason: str) -> None: ...


class AlarmState(Protocol):
    """What dispatch needs to know about resource alarms (MEM-4)."""

    @property
    def publishing_blocked(self) -> bool: ...


class _NoAlarms:
    publishing_blocked = False


class Context:
    def __init__(
        self,
        broker: Broker,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        request_flush: Callable[[], None] = lambda: None,
        alarms: AlarmState | None = None,
        stamp_message_id: bool = False,
    ) -> None:
        self.broker = broker
        self.clock = clock
        self.request_flush = request_flush
        self.sessions: dict[int, Member] = {}
        self.dirty_sessions: list[Member] = []
        self.commits = GroupCommit(request_flush)
        broker.streams.commits = self.commits  # streams deliver what this made durable
        self.stats = Stats()
        self.alarms: AlarmState = alarms if alarms is not None else _NoAlarms()
        self.channel_count = 0
        self.flow = FlowControl()
        self.replies = ReplyConsumers()  # direct reply-to (amq.rabbitmq.reply-to)
        # Publishes and dead letters routed over several loop turns.
        self.turns = Turns(request_flush, scheduler=broker.scheduler)
        self.ingress_bytes = 0  # body bytes published since the last memory sample
        # Delivery-side bounds for new connections; the server follows the watermark.
        self.delivery_budget = memory.delivery_budget(0)
        self.delivery_totals = memory.DeliveryTotals()  # kept by the server's connections
        # Opt-in (``stamp_message_id = true``; RabbitMQ stamps nothing): a message_id on
        # publishes that carry none, unique across restarts: a random boot prefix plus a counter.
        self.stamp_message_id = stamp_message_id
        self._message_ids = itertools.count(1)
        self._boot_id = os.urandom(6).hex()

    def next_message_id(self) -> str:
        return f"hutch-{self._boot_id}-{next(self._message_ids)}"

    def mark_dirty(self, session: Member) -> None:
        if not session.dirty:
            session.dirty = True
            self.dirty_sessions.append(session)
            self.request_flush()

    def take_dirty(self) -> list[Member]:
        dirty = self.dirty_sessions
        self.dirty_sessions = []
        for session in dirty:
            session.dirty = False
        return dirty

    def close_sessions(
        self, reason: str, *, vhost: str | None = None, user: str | None = None
    ) -> int:
        """Force-close (320) the open connections of a deleted vhost or user; returns how many.

        RabbitMQ does the same: a connection must not go on declaring and publishing in a
        vhost that no longer exists (its durable queues would name a vhost that recovery
        cannot find) or as a user that no longer exists.
        """
        closed = 0
        for session in list(self.sessions.values()):
            if session.belongs_to(vhost=vhost, user=user):
                session.force_close(reason)
                closed += 1
        return closed

    def permissions_changed(self, vhost: str, user: str) -> None:
        """A user's permissions in a vhost changed or went: their connections see it at once.

        Connections left with no permission at all are closed (320), as a deleted user's are.
        """
        permission = self.broker.permission(vhost, user)
        for session in list(self.sessions.values()):
            if not session.belongs_to(vhost=vhost, user=user):
                continue
            if permission is None:
                session.force_close(f"user '{user}' has no access to vhost '{vhost}' any more")
            else:
                session.use_permission(permission)

    def release_throttled(self) -> None:
        """Let publishers whose queues caught up (or whose consumers stalled) go on."""
        if self.flow.waiting:
            for session in self.flow.release_ready(self.clock()):
                session.release()
