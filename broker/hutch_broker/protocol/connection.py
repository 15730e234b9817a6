"""The server side of one AMQP 0-9-1 connection, sans I/O: bytes in, events and bytes out.

The asyncio server feeds every received chunk to ``receive_data`` and drains ``next_event`` until
it returns ``NEED_DATA``; dispatch applies each event to the model and answers through the
``send_*`` / ``accept_*`` / ``close*`` calls, which only append to an outbound list that the
server hands to ``transport.writelines`` once per loop tick.  No clock, no socket, no asyncio:
heartbeat and handshake timers belong to the server, credentials and vhosts to dispatch.

Connection states and what moves them (``--`` marks input we do not parse yet)::

    state           input / call                      effect                     next state
    AWAITING_HEADER "AMQP\\0\\0\\x09\\x01"              queue connection.start     STARTING
                    any other 8 bytes                 queue our header, raise    CLOSED
                                                      BadProtocolHeaderError
    STARTING        start-ok                          StartOkReceived            SECURING
    SECURING --     accept_login()                    queue connection.tune      TUNING
    TUNING          tune-ok (valid)                   TuneOkReceived             OPENING
    OPENING         connection.open                   OpenReceived               OPEN_PENDING
    OPEN_PENDING -- accept_open()                     queue open-ok              RUNNING
    RUNNING         channel frames                    see the channel rules      RUNNING
    any above       connection.close                  queue close-ok,            CLOSED
                                                      ConnectionCloseRequested,
                                                      ``closed_by_client``
    any above       close(error)                      queue connection.close     CLOSING
    CLOSING         connection.close                  queue close-ok             CLOSING
                    connection.close-ok               ConnectionCloseConfirmed   CLOSED
                    anything else, even broken frames ignored                    CLOSING
    CLOSED --       everything                        ignored                    CLOSED

``closed`` turns true in CLOSED: flush ``data_to_send()`` and drop the socket, except after the
client's own connection.close (``closed_by_client``): the client drops the socket once it has
read close-ok, so the server keeps reading until then, bounded by a timeout, as RabbitMQ does.
Dropping it first, with bytes of the client unread, makes the kernel answer with a reset.

Rules (RabbitMQ's reader, rabbit_reader.erl, and the spec):

1. Every frame is ``type:u8 channel:u16 size:u32 payload 0xCE``.  A size above frame_max (before
   tune-ok: the frame_max we offer; checked as soon as the 7 header bytes are in) or an end octet
   other than 0xCE is 501 FRAME_ERROR; framing is lost after that (``framing_lost``), so no
   further byte is parsed.  An unknown frame type is 501 ``unknown_frame``; a method payload
   pamqp cannot decode is 501 ``cannot decode``, an unknown method id 540.
2. Before RUNNING only channel 0 may speak: other channels get 505 UNEXPECTED_FRAME, and on channel
   0 a method the state does not expect gets 504 ``unexpected method in connection state S``.
   Heartbeats are legal on channel 0 in every state, on any other channel never (505).
3. A channel is free, open or closing.  Free: only channel.open is legal (else 504 ``expected
   'channel.open'``); it is answered with open-ok at once (``ChannelOpened``).  Open: methods are
   events, basic.publish starts content assembly (below), channel.open again is 504, channel.close
   is answered with close-ok and frees the number (``ChannelCloseRequested``), and a method only a
   server sends (deliver, declare-ok, a stray close-ok, ...) is 503 ``unimplemented method``.
   While ``channel_open_refusal`` is set (dispatch keeps it current: a user's max-channels),
   channel.open is 530 with that text instead.
   Closing (after ``close_channel``): every frame is discarded except channel.close (answered with
   close-ok) and channel.close-ok, which frees the number (``ChannelCloseConfirmed``).  Channel
   numbers above the negotiated channel_max are 530.
4. Content: basic.publish, then one content header of class 60, then body frames until body_size
   bytes have arrived; anything else in between is 505 UNEXPECTED_FRAME with RabbitMQ's texts.
   body_size above max_body_size is 406 PRECONDITION_FAILED on that channel; immediate=true is
   540 NOT_IMPLEMENTED.  A body of size 0 has no body frames.  A publish, content header or
   property list that cannot be decoded is 501, so ``properties.decode_properties`` never fails
   on a ``PublishReceived``.
5. Errors are raised from ``next_event`` after the offending frame was consumed: SoftError has
   ``.channel`` set; dispatch answers with ``close_channel`` or ``close`` and keeps calling
   ``next_event``.  Nothing but ``AMQPError`` subclasses ever escapes for hostile input.
6. While dispatch decides on a login or a vhost (SECURING, OPEN_PENDING) ``next_event`` returns
   ``NEED_DATA`` without parsing, so nothing overtakes the decision.
7. Output to a closing channel, or after ``close()``, is dropped silently (the peer must not see
   it); output to a channel that was never opened raises ``LocalProtocolError`` (a broker bug).

Adopted connections (protocol/handshakes.py): a listener process ran the handshake up to
connection.open and handed the socket over with a ``Handshake`` record. ``Connection(handshake=)``
starts in STARTING with the record's leftover bytes in the buffer, and ``next_event`` replays the
client's start-ok, tune-ok and open from the record, one state at a time and through the same
code as frames read here (SASL parsing, the negotiated values' checks, the vhost), so dispatch
sees ``StartOkReceived``, ``TuneOkReceived`` and ``OpenReceived`` and decides on each as usual.
The only differences: ``accept_login`` sends no connection.tune (the listener did, and the
client answered it), and no buffered byte is parsed before ``accept_open`` sends open-ok.
A refusal at any step is a ``close()`` as in any handshake.

Receive buffer (IMPL-5): a bytearray and a read offset; it is compacted only when the offset has
passed its middle, so every byte is copied O(1) times however the input is split.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final, Literal, Protocol, cast

from pamqp import base, commands, common
from pamqp import frame as pamqp_frame

from hutch_broker.protocol import (
    codec,
    contentscan,
    errors,
    events,
    handshakes,
    properties,
    sasl,
)

VERSION_MAJOR, VERSION_MINOR = 0, 9
FRAME_MIN_SIZE = 4096
LOCALES = "en_US"
# data_to_send joins a turn's output up to this size: above a connection's output slice
# (memory.py, at most 1 MiB of deliveries a turn) plus a large last body.
JOIN_UP_TO = 2 * 1024 * 1024
# The most publishes one ``events.PublishRun`` holds: a 64 KiB read of small messages is a
# few hundred; the bound keeps a run's lists small whatever the read.
RUN_MAX = 256
# A record ``send_deliver_run`` delivers: the store's ``RunRecord`` (msg_id, enqueued_at_ms,
# expire_at_ms, exchange, routing_key, raw_properties, body, length), of which the protocol
# reads the four it sends. A shape, not an import: the protocol core knows no store.
DeliverRecord = tuple[int, int, int, str, str, bytes, bytes, int]


class DeliverMessage(Protocol):
    """What ``send_deliver_entries`` reads of a delivered message (the model's ``Message``)."""

    @property
    def exchange(self) -> str: ...

    @property
    def routing_key(self) -> str: ...

    @property
    def raw_properties(self) -> bytes: ...

    @property
    def body(self) -> bytes: ...


class DeliverEntry(Protocol):
    """What ``send_deliver_entries`` reads of a queue's delivered entry (the model's
    ``Entry``): a shape, as ``DeliverRecord``, so the protocol core imports no model."""

    @property
    def redelivered(self) -> bool: ...

    @property
    def message(self) -> DeliverMessage: ...


class NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA


class ConnectionState(enum.Enum):
    AWAITING_HEADER = "awaiting_header"
    STARTING = "starting"
    SECURING = "securing"
    TUNING = "tuning"
    OPENING = "opening"
    OPEN_PENDING = "open_pending"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


_NO_INPUT = frozenset(
    {ConnectionState.SECURING, ConnectionState.OPEN_PENDING, ConnectionState.CLOSED}
)
_RUNNING = ConnectionState.RUNNING

# Content assembly of one channel: the frame type it expects next.
_EXPECT_METHOD, _EXPECT_HEADER, _EXPECT_BODY = (
    codec.FRAME_METHOD,
    codec.FRAME_HEADER,
    codec.FRAME_BODY,
)
_unpack_frame_header = codec.FRAME_HEADER_STRUCT.unpack_from
_unpack_uint32 = codec.UINT32.unpack_from
# A delivery's three frames as one bytes object, in C when it is built (codec.deliver_frames).
_deliver_frames = codec.deliver_frames
# A publish's content header and body frames in one call, in C when it is built (contentscan).
_scan_content = contentscan.scan
# A whole publish repeating the channel's last one's arguments, the same way (contentscan).
_scan_publish = contentscan.scan_publish
_VALID_PROPERTIES_KEPT = 256
# No property flags and nothing after them: valid without a look. Flags of zero with bytes
# after them are not (properties.validate: "bytes after the last property").
_NO_PROPERTIES = b"\x00\x00"
_PUBLISH_FIELDS_KEPT = 256

# What a client may send on an open channel (the rest is RabbitMQ's 503 "unimplemented method").
_CLIENT_CHANNEL_METHODS = frozenset(
    method.index
    for method in (
        commands.Channel.Flow,
        commands.Channel.FlowOk,
        commands.Exchange.Declare,
        commands.Exchange.Delete,
        commands.Exchange.Bind,
        commands.Exchange.Unbind,
        commands.Queue.Declare,
        commands.Queue.Bind,
        commands.Queue.Purge,
        commands.Queue.Delete,
        commands.Queue.Unbind,
        commands.Basic.Qos,
        commands.Basic.Consume,
        commands.Basic.Cancel,
        commands.Basic.Get,
        commands.Basic.Ack,
        commands.Basic.Reject,
        commands.Basic.RecoverAsync,
        commands.Basic.Recover,
        commands.Basic.Nack,
        commands.Confirm.Select,
        commands.Tx.Select,
        commands.Tx.Commit,
        commands.Tx.Rollback,
    )
)
_PUBLISH = commands.Basic.Publish


class _Channel:
    """Content-assembly state of one open channel."""

    __slots__ = (
        "body_size",
        "chunks",
        "exchange",
        "expect",
        "last_fields",
        "last_payload",
        "last_raw",
        "mandatory",
        "number",
        "raw_properties",
        "received",
        "routing_key",
    )

    def __init__(self, number: int) -> None:
        self.number = number
        self.expect = _EXPECT_METHOD
        self.exchange = ""
        self.routing_key = ""
        self.mandatory = False
        self.raw_properties = b""
        self.body_size = 0
        self.received = 0
        self.chunks: list[bytes] = []
        # The previous whole publish's method payload with its fields, and its properties
        # (valid): a publisher repeats them, and comparing in the buffer costs no copy.
        # Seeded with a sound publish (ticket 0, exchange "", routing key "", no bits).
        self.last_payload = b"\x00\x00\x00\x00\x00"
        self.last_fields = ("", "", False)
        self.last_raw = b"\x00\x00"


class Connection:
    """One client connection, server side.  See the module docstring for the state table."""

    def __init__(
        self,
        *,
        server_properties: common.FieldTable,
        channel_max: int = 2047,
        frame_max: int = 131072,
        heartbeat: int = 60,
        max_body_size: int = 16 * 1024 * 1024,
        handshake: handshakes.Handshake | None = None,
    ) -> None:
        """``handshake``: a connection whose handshake a listener process ran up to
        connection.open (protocol/handshakes.py). It starts in STARTING with the client's
        header, start and start-ok behind it and replays the rest to dispatch (see
        "Adopted connections" in the module docstring)."""
        self._server_properties = server_properties
        self._offered = (channel_max, frame_max, heartbeat)
        self.max_body_size = max_body_size
        self._state = ConnectionState.AWAITING_HEADER
        self._buffer = bytearray()
        # A listener's handshake being replayed, until accept_open (None: the usual handshake).
        self._adopted = handshake
        # The client's start-ok payload as received: what a listener hands over.
        self._start_ok_payload = b""
        if handshake is not None:
            self._state = ConnectionState.STARTING
            self._buffer += handshake.leftover
        self._pos = 0
        self._framing_lost = False
        self._closed_by_client = False
        self._outbound: list[bytes] = []
        self._channel_max = channel_max
        self._frame_max = frame_max
        self._heartbeat = heartbeat
        self._channels: dict[int, _Channel] = {}
        # Set by dispatch when no further channel may open (a user's max-channels limit):
        # the next channel.open is refused with 530 and this text instead of open-ok.
        self.channel_open_refusal: str | None = None
        self._closing: set[int] = set()
        self._deliver_heads: dict[tuple[int, str | bytes], codec.DeliverHead] = {}
        self._valid_properties: set[bytes] = set()
        self._publish_fields: dict[bytes, tuple[str, str, bool]] = {}
        # The open channel whose last publish ``_publish`` took whole: it expects a method, and
        # its next publish is tried in one ``scan_publish`` call first (``next_event``).
        # Cleared wherever that could stop being true: a publish taken the general way, the
        # channel forgotten, the connection closing.
        self._hot: _Channel | None = None
        # Set by a reader that takes repeated publishes as runs (``events.PublishRun``) and
        # gives back what it does not take (``unread``): dispatch's session does.
        self.publish_runs = False
        self.client_properties: common.FieldTable = {}
        self.mechanism = ""
        self.username = ""
        self.locale = ""
        self.vhost = ""

    # -- read-only views -------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def closed(self) -> bool:
        """True once the connection is over: flush ``data_to_send()``, then drop the socket
        (or, when ``closed_by_client``, let the client drop it)."""
        return self._state is ConnectionState.CLOSED

    @property
    def closed_by_client(self) -> bool:
        """True once the client's connection.close was answered with close-ok: keep reading
        (every byte is ignored) until the client closes the socket, not drop it at once."""
        return self._closed_by_client

    @property
    def framing_lost(self) -> bool:
        """True after a 501 framing error: no further byte is read, so no close-ok can ever
        arrive; flush the connection.close and drop the socket (RabbitMQ waits ~1 s)."""
        return self._framing_lost

    @property
    def channel_max(self) -> int:
        """Negotiated after tune-ok; the offered value before."""
        return self._channel_max

    @property
    def frame_max(self) -> int:
        return self._frame_max

    @property
    def heartbeat(self) -> int:
        return self._heartbeat

    @property
    def capabilities(self) -> dict[str, Any]:
        value = self.client_properties.get("capabilities")
        return value if isinstance(value, dict) else {}

    @property
    def open_channels(self) -> frozenset[int]:
        return frozenset(self._channels)

    @property
    def receiving_content(self) -> bool:
        """True while a message is half-received on some channel (its basic.publish came, its
        header or the rest of its body has not).  Walks the open channels: for a decision taken
        once per read during a resource alarm, not per frame."""
        return any(channel.expect != _EXPECT_METHOD for channel in self._channels.values())

    # -- input -----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Buffer received bytes; parsing happens in ``next_event``."""
        if not self._framing_lost and self._state is not ConnectionState.CLOSED:
            self._buffer += data

    def next_event(self) -> events.Event | Literal[NeedData.NEED_DATA]:  # noqa: C901 - hot path
        """The next event, or ``NEED_DATA``.  Raises ``HardError`` / ``SoftError``.

        This loop is the inbound hot path: while RUNNING the state cannot change without an
        event being returned, so it is read once, and a frame the channel expects goes straight
        to its handler.
        """
        if self._state is not _RUNNING:
            return self._next_event_not_running()
        buffer = self._buffer
        hot = self._hot
        if hot is not None and len(buffer) > self._pos:
            # The common publish: the same channel, exchange, routing key and flags as the one
            # before, all its frames in, sound, and its properties known valid (_publish's rule).
            last_raw = hot.last_raw
            found = _scan_publish(
                buffer,
                self._pos,
                hot.number,
                self._frame_max,
                self.max_body_size,
                hot.last_payload,
                last_raw,
            )
            if found is not None:
                raw, body, pos = found
                if raw is last_raw or raw == _NO_PROPERTIES or raw in self._valid_properties:
                    if self.publish_runs:
                        return self._publish_run(hot, raw, body, pos)
                    hot.last_raw = raw
                    self._pos = pos
                    exchange, routing_key, mandatory = hot.last_fields
                    return events.PublishReceived(
                        hot.number, exchange, routing_key, mandatory, raw, body
                    )
        channels = self._channels
        while True:
            pos = self._pos
            if len(buffer) - pos < 7:  # the size is checked as soon as the header is in
                return self._need_data()
            frame_type, channel, size = _unpack_frame_header(buffer, pos)
            if size > self._frame_max:
                return self._lose_framing(self._frame_too_large(frame_type, size))
            end = pos + 7 + size
            if end >= len(buffer):
                return self._need_data()
            if buffer[end] != codec.FRAME_END:
                return self._lose_framing(self._bad_frame_end(frame_type, pos + 7, end))
            self._pos = end + 1
            open_channel = channels.get(channel) if channel else None
            if open_channel is not None and frame_type == open_channel.expect:
                if frame_type == codec.FRAME_METHOD:
                    if size >= 4 and _unpack_uint32(buffer, pos + 7)[0] == codec.BASIC_PUBLISH:
                        event = self._publish(open_channel, pos + 7, end)
                    else:
                        event = self._channel_method(open_channel, pos + 7, end)
                elif frame_type == codec.FRAME_BODY:
                    event = self._content_body(open_channel, pos + 7, end)
                else:
                    event = self._content_header(open_channel, pos + 7, end)
            elif channel:
                event = self._channel_frame(frame_type, channel, pos + 7, end)
            else:
                event = self._connection_frame(_RUNNING, frame_type, channel, pos + 7, end)
            if event is not None:
                return event

    def _publish_run(
        self, hot: _Channel, raw: bytes, body: bytes, end: int
    ) -> events.PublishReceived | events.PublishRun:
        """The hot channel's repeated publishes from the one just found on, as one run: each
        read as ``next_event``'s first try reads one (the same scan, the same properties
        rule), up to ``RUN_MAX`` of them or the first that is not a whole repeat. A single
        one is a ``PublishReceived``."""
        buffer, number, payload = self._buffer, hot.number, hot.last_payload
        frame_max, max_body, valid = self._frame_max, self.max_body_size, self._valid_properties
        start = self._pos
        raws, bodies, ends = [raw], [body], [end]
        while len(ends) < RUN_MAX:
            found = _scan_publish(buffer, end, number, frame_max, max_body, payload, raw)
            if found is None:
                break
            following, body, after = found
            if following is not raw and following != _NO_PROPERTIES and following not in valid:
                break
            raw, end = following, after
            raws.append(raw)
            bodies.append(body)
            ends.append(end)
        hot.last_raw = raw
        self._pos = end
        exchange, routing_key, mandatory = hot.last_fields
        if len(ends) == 1:
            return events.PublishReceived(number, exchange, routing_key, mandatory, raw, body)
        return events.PublishRun(
            number, exchange, routing_key, mandatory, raws, bodies, ends, start
        )

    def unread(self, run: events.PublishRun, taken: int) -> None:
        """Give back ``run``'s messages from ``taken`` on: the next event starts with the first
        of them, as if they had not been read. Only right after ``run`` was read (nothing else
        read since), which the reader's contract says and this checks."""
        if self._pos != run.ends[-1]:
            raise RuntimeError("unread: the connection has read past the run")
        if taken < len(run.ends):
            self._pos = run.ends[taken - 1] if taken else run.start

    def _next_event_not_running(self) -> events.Event | Literal[NeedData.NEED_DATA]:
        """The same frame loop for the handshake and the closing states (not performance bound)."""
        if self._state is ConnectionState.AWAITING_HEADER:
            return self._read_protocol_header()
        buffer = self._buffer
        while True:
            state = self._state
            if state in _NO_INPUT:
                return NEED_DATA
            if state is _RUNNING:
                return self.next_event()
            if self._adopted is not None and state is not ConnectionState.CLOSING:
                return self._replay(state, self._adopted)
            pos = self._pos
            if len(buffer) - pos < 7:
                return self._need_data()
            frame_type, channel, size = _unpack_frame_header(buffer, pos)
            if size > self._frame_max:
                return self._lose_framing(self._frame_too_large(frame_type, size))
            end = pos + 7 + size
            if end >= len(buffer):
                return self._need_data()
            if buffer[end] != codec.FRAME_END:
                return self._lose_framing(self._bad_frame_end(frame_type, pos + 7, end))
            self._pos = end + 1
            event = self._connection_frame(state, frame_type, channel, pos + 7, end)
            if event is not None:
                return event

    def _need_data(self) -> Literal[NeedData.NEED_DATA]:
        """Compact once the consumed prefix is at least half the buffer (amortised O(1))."""
        buffer, pos = self._buffer, self._pos
        if pos and pos * 2 >= len(buffer):
            del buffer[:pos]
            self._pos = 0
        return NEED_DATA

    def _lose_framing(self, error: errors.HardError) -> Literal[NeedData.NEED_DATA]:
        """Framing is gone: stop parsing for good.  Silent while we are closing anyway."""
        self._framing_lost = True
        self._buffer.clear()
        self._pos = 0
        if self._state is ConnectionState.CLOSING:
            return NEED_DATA
        raise error

    def _read_protocol_header(self) -> events.Event | Literal[NeedData.NEED_DATA]:
        received = bytes(self._buffer[:8])
        if received != codec.PROTOCOL_HEADER[: len(received)]:
            self._outbound.append(codec.PROTOCOL_HEADER)
            self._state = ConnectionState.CLOSED
            self._buffer.clear()
            raise errors.BadProtocolHeaderError(
                501, f"FRAME_ERROR - bad protocol header {codec.erlang_binary(received)}"
            )
        if len(received) < 8:
            return NEED_DATA
        self._pos = 8
        self._state = ConnectionState.STARTING
        self._send0(
            commands.Connection.Start(
                version_major=VERSION_MAJOR,
                version_minor=VERSION_MINOR,
                server_properties=self._server_properties,
                mechanisms=sasl.MECHANISMS,
                locales=LOCALES,
            )
        )
        return self.next_event()

    # -- channel 0 and everything before RUNNING -------------------------------------------

    def _connection_frame(
        self, state: ConnectionState, frame_type: int, channel: int, start: int, end: int
    ) -> events.Event | None:
        if state is ConnectionState.CLOSING:
            return self._closing_connection_frame(frame_type, channel, start, end)
        if frame_type not in (1, 2, 3, 8) and (channel == 0 or state is _RUNNING):
            raise self._unknown_frame(frame_type, start, end)
        if channel != 0:
            raise self._unexpected_frame(frame_type, start, end)
        if frame_type == codec.FRAME_HEARTBEAT:
            if end != start:
                raise self._unknown_frame(frame_type, start, end)
            return events.Heartbeat()
        if frame_type != codec.FRAME_METHOD:
            raise self._unexpected_frame(frame_type, start, end)
        method = self._decode_method(start, end)
        if state is ConnectionState.STARTING:
            self._start_ok_payload = bytes(self._buffer[start:end])  # kept for a handover
        return self._connection_method(state, method)

    def _replay(self, state: ConnectionState, handshake: handshakes.Handshake) -> events.Event:
        """An adopted connection's next handshake event, from the listener's record: the same
        checks and events as if its frames had been read here (see the module docstring)."""
        if state is ConnectionState.STARTING:
            self._start_ok_payload = handshake.start_ok
            return self._start_ok(handshake.start_ok_method())
        if state is ConnectionState.TUNING:
            tune_ok = commands.Connection.TuneOk(
                channel_max=handshake.channel_max,
                frame_max=handshake.frame_max,
                heartbeat=handshake.heartbeat,
            )
            return self._tune_ok(tune_ok)
        return self._connection_method(state, commands.Connection.Open(handshake.vhost))

    def _connection_method(self, state: ConnectionState, method: base.Frame) -> events.Event:
        if isinstance(method, commands.Connection.Close):
            return self._client_closed(method)
        if state is ConnectionState.STARTING and isinstance(method, commands.Connection.StartOk):
            return self._start_ok(method)
        if state is ConnectionState.TUNING and isinstance(method, commands.Connection.TuneOk):
            return self._tune_ok(method)
        if state is ConnectionState.OPENING and isinstance(method, commands.Connection.Open):
            self.vhost = method.virtual_host
            self._state = ConnectionState.OPEN_PENDING
            return events.OpenReceived(virtual_host=method.virtual_host)
        if state is _RUNNING and isinstance(method, commands.Connection.UpdateSecret):
            return events.MethodReceived(channel=0, method=method)
        raise errors.channel_error(
            f"unexpected method in connection state {state.value}", method=method
        )

    def _start_ok(self, method: commands.Connection.StartOk) -> events.Event:
        # pamqp hands back a longstr as str when it happens to be UTF-8, else as bytes.
        response = cast("str | bytes", method.response)
        raw = response.encode("utf-8") if isinstance(response, str) else bytes(response)
        username, password = sasl.parse_response(method.mechanism, raw)
        self.client_properties = method.client_properties or {}
        self.mechanism = method.mechanism
        self.username = username
        self.locale = method.locale
        self._state = ConnectionState.SECURING
        return events.StartOkReceived(
            mechanism=method.mechanism,
            username=username,
            password=password,
            client_properties=self.client_properties,
            locale=method.locale,
        )

    def _tune_ok(self, method: commands.Connection.TuneOk) -> events.Event:
        offered_channels, offered_frame, _ = self._offered
        _check_negotiated("frame_max", FRAME_MIN_SIZE, offered_frame, method.frame_max)
        _check_negotiated("channel_max", 1, offered_channels, method.channel_max)
        self._channel_max = method.channel_max
        self._frame_max = method.frame_max
        self._heartbeat = method.heartbeat
        self._state = ConnectionState.OPENING
        return events.TuneOkReceived(
            channel_max=method.channel_max,
            frame_max=method.frame_max,
            heartbeat=method.heartbeat,
        )

    def _client_closed(self, method: commands.Connection.Close) -> events.Event:
        self._send0(commands.Connection.CloseOk())
        self._enter_closed()
        self._closed_by_client = True
        return events.ConnectionCloseRequested(
            reply_code=method.reply_code or 0,
            reply_text=method.reply_text or "",
            class_id=method.class_id or 0,
            method_id=method.method_id or 0,
        )

    def _closing_connection_frame(
        self, frame_type: int, channel: int, start: int, end: int
    ) -> events.Event | None:
        """After our connection.close: only close / close-ok on channel 0 mean anything."""
        if channel != 0 or frame_type != codec.FRAME_METHOD or end - start < 4:
            return None
        index = codec.UINT32.unpack_from(self._buffer, start)[0]
        if index == commands.Connection.Close.index:
            self._send0(commands.Connection.CloseOk())
        elif index == commands.Connection.CloseOk.index:
            self._enter_closed()
            return events.ConnectionCloseConfirmed()
        return None

    # -- channels (RUNNING, channel != 0) --------------------------------------------------

    def _channel_frame(
        self, frame_type: int, channel: int, start: int, end: int
    ) -> events.Event | None:
        """A frame the fast path did not take: out of order, or for a closing or free channel."""
        open_channel = self._channels.get(channel)
        if open_channel is not None or frame_type not in (1, 2, 3):
            raise self._out_of_order(open_channel, frame_type, start, end)
        if channel in self._closing:
            return self._closing_channel_frame(frame_type, channel, start, end)
        return self._free_channel_frame(frame_type, channel, start, end)

    def _channel_method(self, channel: _Channel, start: int, end: int) -> events.Event | None:
        buffer = self._buffer
        if end - start < 4:
            raise self._unknown_frame(codec.FRAME_METHOD, start, end)
        index = codec.UINT32.unpack_from(buffer, start)[0]
        method = codec.decode_ack(buffer, start, end)
        if method is None:
            method = self._decode_method(start, end)
        if index in _CLIENT_CHANNEL_METHODS:
            return events.MethodReceived(channel=channel.number, method=method)
        if isinstance(method, commands.Channel.Close):
            return self._channel_closed_by_client(channel.number, method)
        if isinstance(method, commands.Channel.Open):
            raise errors.channel_error("second 'channel.open' seen", method=method)
        raise errors.command_invalid("unimplemented method", method=method)

    def _publish(self, channel: _Channel, start: int, end: int) -> events.Event | None:
        """basic.publish, and the whole message with it when it is all in the buffer.

        The common publish arrives in one read: method, content header and one body frame (or
        a few, split at frame_max).  This one call takes them all when every frame is complete
        and sound (type, channel, size within frame_max, end octet, class 60, body size within
        bounds, properties already seen valid, body frames adding up to the announced size):
        the content frames with ``contentscan.scan``, one C call where it is built.  Anything
        else (a frame not yet read, a heartbeat or another method in between, properties seen
        for the first time, any error) leaves the content frames unread and goes the general
        way, ``_rest_of_message`` and the main loop, which applies every rule and raises every
        error as before. A publish taken whole makes its channel the connection's hot one:
        ``next_event`` tries the next frames as a repeat of it (``contentscan.scan_publish``)
        before it reads any frame header, since a publisher repeats its arguments.
        """
        buffer = self._buffer
        payload = channel.last_payload
        if len(payload) == end - start - 4 and buffer.startswith(payload, start + 4):
            fields = channel.last_fields
        else:
            payload = bytes(buffer[start + 4 : end])
            known = self._publish_fields.get(payload)
            fields = known if known is not None else self._decode_publish(start, end)
            channel.last_payload, channel.last_fields = payload, fields
        exchange, routing_key, mandatory = fields
        number = channel.number
        found = _scan_content(
            buffer, self._pos, number, self._frame_max, self.max_body_size, channel.last_raw
        )
        if found is not None:
            raw, body, pos = found
            # The properties: the channel's last ones (valid), none at all, or ones seen valid
            # on this connection; seen for the first time, the general way validates them.
            if raw is channel.last_raw or raw == _NO_PROPERTIES or raw in self._valid_properties:
                channel.last_raw = raw
                self._pos = pos
                self._hot = channel
                return events.PublishReceived(number, exchange, routing_key, mandatory, raw, body)
        self._hot = None  # this channel now expects its content: no other publish first
        channel.exchange = exchange
        channel.routing_key = routing_key
        channel.mandatory = mandatory
        channel.expect = _EXPECT_HEADER
        return self._rest_of_message(channel)

    def _decode_publish(self, start: int, end: int) -> tuple[str, str, bool]:
        """basic.publish by hand: ticket:u16 exchange:shortstr routing_key:shortstr bits:u8.

        The decoded fields are kept by payload (publishers repeat theirs), so a repeated
        publish costs one dictionary look-up and shares its exchange and routing-key strings,
        whose hashes the router then finds already computed.
        """
        buffer = self._buffer
        pos = start + 6
        try:
            if pos + 3 > end:
                raise IndexError
            exchange_end = pos + 1 + buffer[pos]
            if exchange_end + 2 > end:
                raise IndexError
            key_end = exchange_end + 1 + buffer[exchange_end]
            if key_end + 1 != end:  # short, or bytes after the flags: RabbitMQ's 501 for both
                raise IndexError
            exchange = buffer[pos + 1 : exchange_end].decode()
            routing_key = buffer[exchange_end + 1 : key_end].decode()
        except (IndexError, UnicodeDecodeError) as exc:
            detail = codec.erlang_binary(buffer[start + 4 : end], limit=64)
            raise errors.frame_error(f"cannot decode {detail}", method=_PUBLISH) from exc
        bits = buffer[key_end]
        if bits & 2:
            raise errors.not_implemented("immediate=true", method=_PUBLISH)
        fields = (exchange, routing_key, bool(bits & 1))
        if len(self._publish_fields) >= _PUBLISH_FIELDS_KEPT:
            self._publish_fields.clear()
        self._publish_fields[bytes(buffer[start + 4 : end])] = fields
        return fields

    def _rest_of_message(self, channel: _Channel) -> events.Event | None:
        """Whole-message fast path: header and body usually arrive in the same read as the
        publish, so take them now instead of going round the main loop twice more.  Only a
        complete, sound frame of the expected type on this channel is taken; anything else is
        left to the main loop (and its errors)."""
        buffer, pos, number = self._buffer, self._pos, channel.number
        event = None
        for expected in (codec.FRAME_HEADER, codec.FRAME_BODY):
            if channel.expect != expected or len(buffer) - pos < codec.FRAME_OVERHEAD:
                break
            frame_type, frame_channel, size = _unpack_frame_header(buffer, pos)
            end = pos + 7 + size
            if (
                frame_type != expected
                or frame_channel != number
                or size > self._frame_max
                or end >= len(buffer)
                or buffer[end] != codec.FRAME_END
            ):
                break
            self._pos = end + 1
            if expected == codec.FRAME_HEADER:
                event = self._content_header(channel, pos + 7, end)
            else:
                event = self._content_body(channel, pos + 7, end)
            if event is not None:
                break
            pos = end + 1
        return event

    def _content_header(self, channel: _Channel, start: int, end: int) -> events.Event | None:
        if end - start < 14:
            raise errors.frame_error(
                f"cannot decode content header {codec.erlang_binary(self._buffer[start:end])}",
                method=_PUBLISH,
            )
        class_id, _, body_size = codec.CONTENT_PREFIX.unpack_from(self._buffer, start)
        if class_id != codec.BASIC_CLASS:
            raise errors.unexpected_frame(
                f"expected content header for class 60, got one for class {class_id} instead",
                method=_PUBLISH,
            )
        channel.expect = _EXPECT_METHOD
        if body_size > self.max_body_size:
            raise errors.precondition_failed(
                f"message size {body_size} is larger than configured max size {self.max_body_size}",
                method=_PUBLISH,
                channel=channel.number,
            )
        raw = bytes(self._buffer[start + 12 : end])
        if raw != _NO_PROPERTIES and raw not in self._valid_properties:
            self._remember_valid(raw)
        if not body_size:
            return self._published(channel, raw, b"")
        channel.raw_properties = raw
        channel.body_size = body_size
        channel.received = 0
        channel.expect = _EXPECT_BODY
        return None

    def _content_body(self, channel: _Channel, start: int, end: int) -> events.Event | None:
        received = channel.received + end - start
        if received == channel.body_size and not channel.chunks:
            channel.expect = _EXPECT_METHOD
            return events.PublishReceived(
                channel.number,
                channel.exchange,
                channel.routing_key,
                channel.mandatory,
                channel.raw_properties,
                bytes(self._buffer[start:end]),
            )
        if received > channel.body_size:
            raise errors.frame_error(
                f"content body of {received} bytes is larger than the {channel.body_size} "
                "bytes announced in the content header",
                method=_PUBLISH,
            )
        channel.chunks.append(bytes(self._buffer[start:end]))
        channel.received = received
        if received < channel.body_size:
            return None
        body = b"".join(channel.chunks)
        channel.chunks = []
        channel.expect = _EXPECT_METHOD
        return self._published(channel, channel.raw_properties, body)

    def _remember_valid(self, raw: bytes) -> None:
        """Validate properties once per distinct blob: publishers mostly repeat theirs."""
        _validate_properties(raw)
        if len(self._valid_properties) >= _VALID_PROPERTIES_KEPT:
            self._valid_properties.clear()
        self._valid_properties.add(raw)

    @staticmethod
    def _published(channel: _Channel, raw_properties: bytes, body: bytes) -> events.Event:
        return events.PublishReceived(
            channel.number,
            channel.exchange,
            channel.routing_key,
            channel.mandatory,
            raw_properties,
            body,
        )

    def _out_of_order(
        self, channel: _Channel | None, frame_type: int, start: int, end: int
    ) -> errors.HardError:
        """The error for a frame the channel's content assembly does not expect."""
        if frame_type not in (1, 2, 3, 8):
            return self._unknown_frame(frame_type, start, end)
        if frame_type == codec.FRAME_HEARTBEAT:
            return self._unexpected_frame(frame_type, start, end)
        expect = _EXPECT_METHOD if channel is None else channel.expect
        if expect == _EXPECT_HEADER:
            return errors.unexpected_frame(
                "expected content header for class 60, got non content header frame instead",
                method=_PUBLISH,
            )
        if expect == _EXPECT_BODY:
            return errors.unexpected_frame(
                "expected content body, got non content body frame instead", method=_PUBLISH
            )
        return errors.unexpected_frame("expected method frame, got non method frame instead")

    def _free_channel_frame(
        self, frame_type: int, channel: int, start: int, end: int
    ) -> events.Event:
        if frame_type != codec.FRAME_METHOD:
            raise self._out_of_order(None, frame_type, start, end)
        method = self._decode_method(start, end)
        if not isinstance(method, commands.Channel.Open):
            raise errors.channel_error("expected 'channel.open'", method=method)
        # Numbers above channel_max are refused (the spec's rule), which also caps the count:
        # RabbitMQ's "number of channels opened (N) has reached ..." can never come first.
        if channel > self._channel_max:
            raise errors.not_allowed(
                f"channel number {channel} is higher than the negotiated channel_max "
                f"({self._channel_max})",
                method=method,
            )
        if self.channel_open_refusal is not None:
            raise errors.not_allowed(self.channel_open_refusal, method=method)
        self._channels[channel] = _Channel(channel)
        self._send(channel, commands.Channel.OpenOk())
        return events.ChannelOpened(channel=channel)

    def _closing_channel_frame(
        self, frame_type: int, channel: int, start: int, end: int
    ) -> events.Event | None:
        """After our channel.close: discard all but channel.close and channel.close-ok."""
        if frame_type != codec.FRAME_METHOD or end - start < 4:
            return None
        index = codec.UINT32.unpack_from(self._buffer, start)[0]
        if index == codec.CHANNEL_CLOSE:
            self._send(channel, commands.Channel.CloseOk())
        elif index == codec.CHANNEL_CLOSE_OK:
            self._closing.discard(channel)
            return events.ChannelCloseConfirmed(channel=channel)
        return None

    def _channel_closed_by_client(
        self, channel: int, method: commands.Channel.Close
    ) -> events.Event:
        self._send(channel, commands.Channel.CloseOk())
        self._forget_channel(channel)
        return events.ChannelCloseRequested(
            channel=channel,
            reply_code=method.reply_code or 0,
            reply_text=method.reply_text or "",
            class_id=method.class_id or 0,
            method_id=method.method_id or 0,
        )

    # -- decoding helpers and error texts --------------------------------------------------

    def _decode_method(self, start: int, end: int) -> base.Frame:
        if end - start < 4:
            raise self._unknown_frame(codec.FRAME_METHOD, start, end)
        return codec.decode_method(bytes(self._buffer[start:end]))

    def _snippet(self, start: int, end: int) -> str:
        """RabbitMQ's "all octets = <<...>>" / "first 16 octets = <<...>>"."""
        if end - start <= 16:
            return f"all octets = {codec.erlang_binary(self._buffer[start:end])}"
        return f"first 16 octets = {codec.erlang_binary(self._buffer[start : start + 16])}"

    def _unknown_frame(self, frame_type: int, start: int, end: int) -> errors.HardError:
        return errors.frame_error(f"type {frame_type}, {self._snippet(start, end)}: unknown_frame")

    def _unexpected_frame(self, frame_type: int, start: int, end: int) -> errors.HardError:
        return errors.unexpected_frame(f"type {frame_type}, {self._snippet(start, end)}")

    def _frame_too_large(self, frame_type: int, size: int) -> errors.HardError:
        limit = self._frame_max - codec.FRAME_OVERHEAD
        return errors.frame_error(
            f"type {frame_type}, all octets = <<>>: {{frame_too_large,{size},{limit}}}"
        )

    def _bad_frame_end(self, frame_type: int, start: int, end: int) -> errors.HardError:
        marker = self._buffer[end]
        return errors.frame_error(
            f"type {frame_type}, {self._snippet(start, end)}: {{invalid_frame_end_marker,{marker}}}"
        )

    # -- handshake answers -----------------------------------------------------------------

    def accept_login(self) -> None:
        """After ``StartOkReceived``: the credentials are good; offer the tuning values (an
        adopted connection's client has them already: its tune-ok is replayed next)."""
        self._require(ConnectionState.SECURING, "accept_login")
        if self._adopted is not None:
            self._state = ConnectionState.TUNING
            return
        channel_max, frame_max, heartbeat = self._offered
        self._send0(
            commands.Connection.Tune(
                channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
            )
        )
        self._state = ConnectionState.TUNING

    def accept_open(self) -> None:
        """After ``OpenReceived``: the vhost is granted; the connection is usable."""
        self._require(ConnectionState.OPEN_PENDING, "accept_open")
        self._send0(commands.Connection.OpenOk())
        self._state = _RUNNING
        self._adopted = None

    def handshake_record(self) -> handshakes.Handshake:
        """After ``OpenReceived``, in a listener: the handshake so far and the bytes read past
        connection.open, for the worker that owns the vhost. Changes nothing: once the worker
        has the socket, call ``lost()``; if it cannot take it, ``close()`` as usual."""
        self._require(ConnectionState.OPEN_PENDING, "handshake_record")
        return handshakes.Handshake(
            start_ok=self._start_ok_payload,
            channel_max=self._channel_max,
            frame_max=self._frame_max,
            heartbeat=self._heartbeat,
            vhost=self.vhost,
            leftover=bytes(self._buffer[self._pos :]),
        )

    def _require(self, state: ConnectionState, call: str) -> None:
        if self._state is not state:
            raise errors.LocalProtocolError(f"{call}() in state {self._state.value}")

    # -- output ----------------------------------------------------------------------------

    @property
    def pending_output(self) -> tuple[bytes, ...]:
        """The frames ``data_to_send`` would hand over now, copied (for measurements such as
        bench/flush_stats.py; the hot path never calls it)."""
        return tuple(self._outbound)

    def data_to_send(self) -> list[bytes]:
        """Everything queued since the last call, in order; the list is handed over.

        A turn's many small frames (a delivery each, confirms, replies) come as one bytes
        object: uvloop's ``writelines`` handles each buffer on its own, and one copy of the
        turn's output plus one ``write`` cost a little less (3-7 % per 1 KiB frame, 8 to 400
        frames a turn; docs/bench/profile.md). Past ``JOIN_UP_TO`` bytes the pieces stay
        apart, so a large body is not copied once more.
        """
        outbound = self._outbound
        self._outbound = []
        if len(outbound) > 1 and sum(map(len, outbound)) <= JOIN_UP_TO:
            return [b"".join(outbound)]
        return outbound

    def send_method(self, channel: int, method: base.Frame) -> None:
        """Any method without content.  Channel.Close / Connection.Close go through
        ``close_channel`` / ``close`` so the state machine knows about them."""
        if isinstance(method, commands.Channel.Close | commands.Connection.Close):
            error = errors.AMQPError(
                method.reply_code or 0,
                method.reply_text or "",
                method.class_id or 0,
                method.method_id or 0,
            )
            if isinstance(method, commands.Channel.Close):
                self.close_channel(channel, error)
            else:
                self.close(error)
            return
        if self._may_send(channel):
            self._outbound.append(codec.encode_method(channel, method))

    def send_deliver(
        self,
        channel: int,
        consumer_tag: bytes | str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
    ) -> None:
        """Basic.Deliver with its content: the hot path, one bytes object per message.

        ``codec.encode_deliver``'s common case, one body frame, is written out here: the call
        was one of a dozen a delivery makes. Everything else goes to ``encode_deliver``.
        """
        if channel not in self._channels and not self._may_send_content(channel):
            return
        head = self._deliver_heads.get((channel, consumer_tag)) or self._new_head(
            channel, consumer_tag
        )
        if 0 < len(body) <= self._frame_max - codec.FRAME_OVERHEAD:
            names = head.routes.get((exchange, routing_key)) or head.route(exchange, routing_key)
            self._outbound.append(
                _deliver_frames(
                    channel, head.const, delivery_tag, redelivered, names, raw_properties, body
                )
            )
            return
        self._outbound.append(
            codec.encode_deliver(
                head,
                channel,
                delivery_tag,
                redelivered,
                exchange,
                routing_key,
                raw_properties,
                body,
                self._frame_max,
            )
        )

    def send_deliver_run(
        self,
        channel: int,
        consumer_tag: bytes | str,
        first_tag: int,
        run: Sequence[DeliverRecord],
        count: int,
        room: int,
        per_delivery: int,
    ) -> tuple[int, int]:
        """Basic.Deliver of ``run``'s first ``count`` records to one consumer, tags from
        ``first_tag`` on, none redelivered: (deliveries encoded, their bodies' bytes).

        Stops early once the bodies plus ``per_delivery`` bytes each reach ``room``: the
        delivery that reaches it is the last (the channel's output slice, as ``send_deliver``
        and its caller count one delivery at a time). The bytes are ``send_deliver``'s for each
        record; this is its loop, taken once per run of a stream consumer's records instead of
        a call (and the consumer's head and route looked up) per record: the stream read's
        hot loop (docs/bench/profile.md). ``DeliverRecord`` is the shape of the store's
        ``RunRecord``; what else a record holds is not read here.
        """
        outbound = self._outbound
        if channel not in self._channels and not self._may_send_content(channel):
            outbound = []  # closing: counted as delivered, as send_deliver's callers count
        append = outbound.append
        head = self._deliver_heads.get((channel, consumer_tag)) or self._new_head(
            channel, consumer_tag
        )
        const, routes = head.const, head.routes
        limit = self._frame_max - codec.FRAME_OVERHEAD
        deliver_frames = _deliver_frames
        last_exchange: str | None = None
        last_key: str | None = None
        names = b""
        tag = first_tag
        body_bytes = 0
        for index in range(count):
            _, _, _, exchange, routing_key, raw_properties, body, _ = run[index]
            if exchange != last_exchange or routing_key != last_key:
                names = routes.get((exchange, routing_key)) or head.route(exchange, routing_key)
                last_exchange, last_key = exchange, routing_key
            body_size = len(body)
            if 0 < body_size <= limit:
                append(deliver_frames(channel, const, tag, False, names, raw_properties, body))
            else:
                append(
                    codec.encode_deliver(
                        head,
                        channel,
                        tag,
                        False,
                        exchange,
                        routing_key,
                        raw_properties,
                        body,
                        self._frame_max,
                    )
                )
            tag += 1
            body_bytes += body_size
            room -= body_size + per_delivery
            if room <= 0:
                break
        return tag - first_tag, body_bytes

    def send_deliver_entries(
        self,
        channel: int,
        consumer_tag: bytes | str,
        first_tag: int,
        entries: Sequence[DeliverEntry],
    ) -> None:
        """Basic.Deliver of each of ``entries`` to one consumer, tags from ``first_tag`` on.

        ``send_deliver``'s bytes for each entry, in one call for a run of a queue's
        deliveries to its consumer (``Channel.deliver_from``): the consumer's head is looked
        up once and its route once per exchange and routing key in a row, where a call per
        delivery was a third of the delivery stage's Python (docs/bench/profile.md).
        """
        if channel not in self._channels and not self._may_send_content(channel):
            return
        append = self._outbound.append
        head = self._deliver_heads.get((channel, consumer_tag)) or self._new_head(
            channel, consumer_tag
        )
        const, routes = head.const, head.routes
        limit = self._frame_max - codec.FRAME_OVERHEAD
        deliver_frames = _deliver_frames
        last_exchange: str | None = None
        last_key: str | None = None
        names = b""
        tag = first_tag
        for entry in entries:
            message = entry.message
            exchange, routing_key, body = message.exchange, message.routing_key, message.body
            if exchange != last_exchange or routing_key != last_key:
                names = routes.get((exchange, routing_key)) or head.route(exchange, routing_key)
                last_exchange, last_key = exchange, routing_key
            if 0 < len(body) <= limit:
                append(
                    deliver_frames(
                        channel, const, tag, entry.redelivered, names, message.raw_properties, body
                    )
                )
            else:
                append(
                    codec.encode_deliver(
                        head,
                        channel,
                        tag,
                        entry.redelivered,
                        exchange,
                        routing_key,
                        message.raw_properties,
                        body,
                        self._frame_max,
                    )
                )
            tag += 1

    def _new_head(self, channel: int, consumer_tag: bytes | str) -> codec.DeliverHead:
        """A consumer's pre-packed Deliver bytes, made at its first delivery and kept until it
        is cancelled or its channel closes (the look-up itself stays inline in the callers)."""
        head = self._deliver_heads[(channel, consumer_tag)] = codec.DeliverHead(consumer_tag)
        return head

    def forget_consumer(self, channel: int, consumer_tag: bytes | str) -> None:
        """Drop the pre-packed Deliver bytes of a cancelled consumer (optional; bounded memory).
        Closing the channel forgets all of its consumers."""
        self._deliver_heads.pop((channel, consumer_tag), None)

    def send_get_ok(
        self,
        channel: int,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        message_count: int,
        raw_properties: bytes,
        body: bytes,
    ) -> None:
        if self._may_send_content(channel):
            self._outbound.append(
                codec.encode_get_ok(
                    channel,
                    delivery_tag,
                    redelivered,
                    exchange,
                    routing_key,
                    message_count,
                    raw_properties,
                    body,
                    self._frame_max,
                )
            )

    def send_return(
        self,
        channel: int,
        reply_code: int,
        reply_text: str,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
    ) -> None:
        if self._may_send_content(channel):
            self._outbound.append(
                codec.encode_return(
                    channel,
                    reply_code,
                    reply_text,
                    exchange,
                    routing_key,
                    raw_properties,
                    body,
                    self._frame_max,
                )
            )

    def send_heartbeat(self) -> None:
        if self._state not in (ConnectionState.AWAITING_HEADER, ConnectionState.CLOSED):
            self._outbound.append(codec.HEARTBEAT_FRAME)

    def close_channel(self, channel: int, error: errors.AMQPError) -> None:
        """Send channel.close; the channel is closing until the client's close-ok.  A no-op for
        a channel that is not open (already closing, or freed by the client's own close)."""
        if self._state is not _RUNNING or channel not in self._channels:
            return
        self._forget_channel(channel)
        self._closing.add(channel)
        self._send(
            channel,
            commands.Channel.Close(
                reply_code=error.reply_code,
                reply_text=error.reply_text,
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )

    def close(self, error: errors.AMQPError) -> None:
        """Send connection.close; from now on only close / close-ok are read.  A no-op once
        closing or closed (and before the protocol header, where there is nobody to tell)."""
        state = self._state
        if state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
            return
        if state is ConnectionState.AWAITING_HEADER:
            self._enter_closed()
            return
        self._send0(
            commands.Connection.Close(
                reply_code=error.reply_code,
                reply_text=error.reply_text,
                class_id=error.class_id,
                method_id=error.method_id,
            )
        )
        self._channels.clear()
        self._closing.clear()
        self._deliver_heads.clear()
        self._hot = None
        self._state = ConnectionState.CLOSING

    def lost(self) -> None:
        """The socket is gone: closed, and everything the client sent that was not yet a whole
        message (each channel's half-received content, the receive buffer) is dropped, with the
        output nobody will read.  Whatever still refers to this object afterwards holds next to
        nothing, however much a hostile client had left half-sent."""
        self._enter_closed()
        self._outbound.clear()

    # -- internals -------------------------------------------------------------------------

    def _send0(self, method: base.Frame) -> None:
        self._outbound.append(pamqp_frame.marshal(method, 0))

    def _send(self, channel: int, method: base.Frame) -> None:
        self._outbound.append(pamqp_frame.marshal(method, channel))

    def _may_send(self, channel: int) -> bool:
        """Open channel (or channel 0 once started): yes.  Closing channel or connection: drop
        silently, the peer must not see it.  A channel that was never open: our own bug."""
        if channel in self._channels:
            return True
        state = self._state
        if state in (ConnectionState.CLOSING, ConnectionState.CLOSED) or channel in self._closing:
            return False
        if channel == 0 and state is not ConnectionState.AWAITING_HEADER:
            return True
        raise errors.LocalProtocolError(
            f"sending on channel {channel}, which is not open (state {state.value})"
        )

    def _may_send_content(self, channel: int) -> bool:
        if channel == 0 and self._state not in (ConnectionState.CLOSING, ConnectionState.CLOSED):
            raise errors.LocalProtocolError("content frames on channel 0")
        return self._may_send(channel)

    def _forget_channel(self, channel: int) -> None:
        self._channels.pop(channel, None)
        if self._hot is not None and self._hot.number == channel:
            self._hot = None
        if self._deliver_heads:
            for key in [key for key in self._deliver_heads if key[0] == channel]:
                del self._deliver_heads[key]

    def _enter_closed(self) -> None:
        self._state = ConnectionState.CLOSED
        self._channels.clear()
        self._closing.clear()
        self._deliver_heads.clear()
        self._hot = None
        self._buffer.clear()
        self._pos = 0


def _check_negotiated(field: str, minimum: int, offered: int, value: int) -> None:
    """RabbitMQ's validate_negotiated_integer_value: 530 with its exact texts (CN-3)."""
    if value != 0 and value < minimum:
        _fail_negotiation(field, "lower", "minimum", minimum, value)
    if offered != 0 and (value == 0 or value > offered):
        _fail_negotiation(field, "higher", "maximum", offered, value)


def _fail_negotiation(field: str, comparison: str, bound: str, limit: int, value: int) -> None:
    detail = " (no limit)" if field == "channel_max" and value == 0 else ""
    raise errors.not_allowed(
        f"negotiated {field} = {value}{detail} is {comparison} than the {bound} allowed value "
        f"({limit})",
        method=commands.Connection.Tune,
    )


def _validate_properties(raw: bytes) -> None:
    try:
        properties.validate(raw)
    except properties.MalformedPropertiesError as exc:
        raise errors.frame_error(f"cannot decode content header properties: {exc}") from exc
