"""What the protocol core tells dispatch: the whole vocabulary, as plain immutable records.

``Connection.next_event()`` returns one of these (or ``NEED_DATA``).  Each record states what
already happened on the wire, so dispatch never has to answer protocol bookkeeping itself: by the
time it sees ``ChannelOpened`` the ``channel.open-ok`` is queued, by the time it sees
``ChannelCloseRequested`` the ``close-ok`` is queued and the channel number is free again.

``PublishReceived`` is the one hot record (one per published message).  It is slotted but not
frozen: a frozen dataclass pays ``object.__setattr__`` per field, 0.9 µs against 0.2 µs here,
which is a quarter of the whole per-message parse budget.  Treat it as immutable all the same.
``PublishRun`` is many of them at once, for a consumer of events that asked for runs
(``Connection.publish_runs``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pamqp import base, common


@dataclass(frozen=True, slots=True)
class StartOkReceived:
    """connection.start-ok: credentials to check.  Dispatch answers with ``accept_login()`` or
    ``close(errors.login_refused(mechanism))``; until then ``next_event`` pauses."""

    mechanism: str
    username: str
    password: str
    client_properties: common.FieldTable
    locale: str


@dataclass(frozen=True, slots=True)
class TuneOkReceived:
    """connection.tune-ok, already validated (CN-3); ``heartbeat`` is the client's value."""

    channel_max: int
    frame_max: int
    heartbeat: int


@dataclass(frozen=True, slots=True)
class OpenReceived:
    """connection.open: dispatch checks the vhost and answers ``accept_open()`` or ``close()``;
    until then ``next_event`` pauses."""

    virtual_host: str


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    """channel.open; channel.open-ok is already queued."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelCloseRequested:
    """The client closed a channel; close-ok is queued and the number is free again."""

    channel: int
    reply_code: int
    reply_text: str
    class_id: int = 0
    method_id: int = 0


@dataclass(frozen=True, slots=True)
class ChannelCloseConfirmed:
    """The client's close-ok for a channel.close the server sent; the number is free again."""

    channel: int


@dataclass(frozen=True, slots=True)
class MethodReceived:
    """Any other client method on an open channel (queue.*, exchange.*, basic.* but publish,
    confirm.*, tx.*, channel.flow, ...), or connection.update-secret on channel 0."""

    channel: int
    method: base.Frame


@dataclass(slots=True)
class PublishReceived:
    """A whole published message: basic.publish + content header + body frames.

    ``raw_properties`` is the content header from the property flags on, byte for byte as the
    publisher sent it (IMPL-1); read it with ``protocol.properties``.  There is no
    ``immediate``: ``immediate=true`` is refused with 540 before the content arrives.
    """

    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    raw_properties: bytes
    body: bytes


@dataclass(slots=True)
class PublishRun:
    """Whole published messages in a row on one channel, each repeating the one before's
    basic.publish arguments (exchange, routing key, flags): ``PublishReceived`` for each pair
    of ``raws`` and ``bodies``, in order, read in one call.

    Only for a reader that set ``Connection.publish_runs``: it must take the messages in order
    and, when it stops before the last (the connection parked, throttled or blocked), give
    the rest back at once with ``Connection.unread``, before asking for the next event, so
    that they are read again as they would have been one at a time.
    ``ends[i]`` is where message ``i`` ends in the connection's input, ``start`` where the
    first begins.
    """

    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    raws: list[bytes]
    bodies: list[bytes]
    ends: list[int]
    start: int

    def message(self, index: int) -> PublishReceived:
        """Message ``index`` as its own event (a reader's path for the unusual ones)."""
        return PublishReceived(
            self.channel,
            self.exchange,
            self.routing_key,
            self.mandatory,
            self.raws[index],
            self.bodies[index],
        )


@dataclass(frozen=True, slots=True)
class ConnectionCloseRequested:
    """The client sent connection.close; close-ok is queued.  No further events follow:
    flush ``data_to_send()`` and drop the socket."""

    reply_code: int
    reply_text: str
    class_id: int = 0
    method_id: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionCloseConfirmed:
    """The client's close-ok after our connection.close: drop the socket now."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A heartbeat frame arrived.  Any received byte already proves liveness; this exists only
    so a server may count heartbeats.  Safe to ignore."""


Event = (
    StartOkReceived
    | TuneOkReceived
    | OpenReceived
    | ChannelOpened
    | ChannelCloseRequested
    | ChannelCloseConfirmed
    | MethodReceived
    | PublishReceived
    | PublishRun
    | ConnectionCloseRequested
    | ConnectionCloseConfirmed
    | Heartbeat
)
