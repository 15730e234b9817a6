"""One client connection as the broker sees it: login, vhost, channels, errors.

``Session.handle_data`` feeds bytes to the sans-I/O protocol and applies
every resulting event to the model.  AMQP errors raised anywhere below are
turned into ``channel.close`` (soft) or ``connection.close`` (hard) here and
nowhere else, so a bad frame or a bad argument affects only its own channel
or connection and never the broker.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from pamqp import commands

from hutch_broker.dispatch import methods
from hutch_broker.dispatch.channels import Channel
from hutch_broker.dispatch.context import NO_TRANSPORT, Context, Member, TLSInfo, Transport
from hutch_broker.model import access, limits
from hutch_broker.model.queues import Consumer
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import connection as proto_connection
from hutch_broker.protocol import errors, events

log = logging.getLogger(__name__)
_ids = itertools.count(1)


class _Publish:
    index = (60 << 16) | 40


_PUBLISH = _Publish()


class Session:
    def __init__(
        self,
        context: Context,
        proto: proto_connection.Connection,
        *,
        peer_host: str | None,
        peer_port: int = 0,
        transport: Transport | None = None,
        local_address: str | None = None,
        tls: TLSInfo | None = None,
    ) -> None:
        self.id = next(_ids)
        self.context = context
        self.proto = proto
        proto.publish_runs = True  # repeated publishes come as runs: _process takes them
        self.peer_host = peer_host
        self.peer_port = peer_port
        self.local_address = local_address  # "host:port" of the listener it came in on
        self.tls = tls
        self.user: access.User | None = None
        self.vhost: VirtualHost | None = None
        self.permission: access.Permission | None = None
        self.channels: dict[int, Channel] = {}
        self.exclusive_queues: set[Any] = set()
        self.dirty = False
        self.writable = True
        budget = context.delivery_budget  # memory.DeliveryBudget; dispatch/channels.py uses it
        self.output_pending = 0
        # In-memory sessions (no transport, tests and tools) are never written between turns.
        self.output_slice = budget.output_slice if transport is not None else 1 << 62
        self.held_bytes = 0
        self.held_budget = budget.held_per_connection
        self._releasing = False
        self.closed = False
        self.blocked = False
        self.throttled = False
        self.parked = False  # a publish is being routed over later loop turns (dispatch.turns)
        self.pressure: list[Any] = []  # queues over the flow high-water mark after a publish
        self.notified_blocked = False
        self.held_publish: events.PublishReceived | None = None
        self.transport: Transport = transport or NO_TRANSPORT
        self.connected_at_ms = context.clock()
        self.publishes = 0
        self._permission_cache: dict[tuple[str, str], bool] = {}
        # Exchanges this connection may write to under its current permission: what every
        # publish asks, read inline by dispatch.publishing (check_write fills it).
        self.writable_exchanges: set[str] = set()
        self._topic_matchers: dict[str, Any] = {}  # expanded topic pattern → matcher or None

    @property
    def open_vhost(self) -> VirtualHost:
        """The vhost of an open connection: methods flow only after connection.open."""
        vhost = self.vhost
        if vhost is None:
            raise errors.error_for(503, "connection not open")
        return vhost

    # -- input ------------------------------------------------------------

    def handle_data(self, data: bytes) -> None:
        """Feed bytes and process every complete event (the server's only input call)."""
        self.proto.receive_data(data)
        self._process()
        if not self.blocked and self._must_block() and self.proto.receiving_content:
            # As RabbitMQ does on a content frame during an alarm: a message that never
            # completes must not get around the alarm, or one client could fill the memory
            # with half-sent bodies (channel_max x max_message_size per connection).
            self._block(None)

    def _process(self) -> None:
        # The publishes of one read share one clock reading, taken at the first (now_ms): their
        # TTLs count from it, a read's processing (well under a millisecond a 64 KiB read)
        # earlier than each one's own; read per publish, the clock was 2 % of scenario 1's CPU.
        proto, now_ms = self.proto, -1
        self._update_channel_refusal()
        while not self.closed and not self.blocked and not self.throttled and not self.parked:
            try:
                event = proto.next_event()
                if event is proto_connection.NEED_DATA:
                    break
                if isinstance(event, events.PublishReceived):
                    # The hot path, one message each: handle_event's publish branch, inline.
                    context = self.context
                    if context.alarms.publishing_blocked:  # _must_block(), read inline
                        self._block(event)
                        break
                    if now_ms < 0:
                        now_ms = context.clock()
                    try:
                        methods.publish(self, self.channels[event.channel], event, now_ms)
                    except errors.AMQPError as exc:
                        _attach_method(exc, _PUBLISH, event.channel)
                        raise
                elif type(event) is events.PublishRun:
                    # Repeated publishes read as a run (publishing.publish_run); what it does
                    # not take goes back to the protocol, to be read again when this goes on.
                    context = self.context
                    if context.alarms.publishing_blocked:
                        proto.unread(event, 1)
                        self._block(event.message(0))
                        break
                    if now_ms < 0:
                        now_ms = context.clock()
                    try:
                        channel = self.channels[event.channel]
                        taken = methods.publish_run(self, channel, event, now_ms)
                    except errors.AMQPError as exc:  # the rest are dropped: see publish_run
                        _attach_method(exc, _PUBLISH, event.channel)
                        raise
                    proto.unread(event, taken)
                else:
                    self.handle_event(event)
            except errors.SoftError as exc:
                self.fail_channel(exc)
            except errors.HardError as exc:
                self.fail_connection(exc)
            if self.pressure:
                self._throttle()
        self.context.mark_dirty(self)

    # -- publisher flow control (dispatch/flow.py) ----------------------------

    def _throttle(self) -> None:
        queues, self.pressure = self.pressure, []
        if self.closed:
            return
        self.throttled = True
        self.context.flow.throttle(self, queues, self.context.clock())
        self.transport.pause_reading()

    def release(self) -> None:
        """Consumers caught up: read and process this publisher again."""
        if not self.throttled or self.closed:
            return
        self.throttled = False
        if not self.blocked and not self.parked:
            self.transport.resume_reading()
        self._process()

    # -- resource alarms (MEM-4..MEM-6) --------------------------------------

    def _must_block(self) -> bool:
        return self.context.alarms.publishing_blocked

    def _block(self, event: events.PublishReceived | None) -> None:
        """Hold this publish, tell the client (if it listens) and stop reading its socket."""
        self.blocked = True
        self.held_publish = event
        if self.capability("connection.blocked"):
            reason = getattr(self.context.alarms, "block_reason", "low on memory")
            self.proto.send_method(0, commands.Connection.Blocked(reason))
            self.notified_blocked = True
        self.transport.pause_reading()

    def unblock(self) -> None:
        """The alarm cleared: unblocked, complete the held publish, read again."""
        if not self.blocked or self.closed:
            return
        self.blocked = False
        if self.notified_blocked:
            self.proto.send_method(0, commands.Connection.Unblocked())
            self.notified_blocked = False
        held, self.held_publish = self.held_publish, None
        if held is not None:
            try:
                self.handle_event(held)
            except errors.SoftError as exc:
                self.fail_channel(exc)
            except errors.HardError as exc:
                self.fail_connection(exc)
        if not self.throttled and not self.parked:
            self.transport.resume_reading()
        self._process()

    # -- publishes routed over several loop turns (dispatch/turns.py) ----------

    def park_reading(self) -> None:
        """A publish is routed over later turns: read and process nothing until it is done,
        so the connection's frames keep their order and its buffered input stays small."""
        self.parked = True
        self.transport.pause_reading()

    def resume_parked(self) -> None:
        """The parked publish is done: go on with the frames already read, then read again."""
        self.parked = False
        if self.pressure:
            self._throttle()
        if not self.blocked and not self.throttled:
            self.transport.resume_reading()
        self._process()

    def handle_event(self, event: Any) -> None:
        now_ms = self.context.clock()
        if isinstance(event, events.PublishReceived):
            try:
                methods.publish(self, self.channels[event.channel], event, now_ms)
            except errors.AMQPError as exc:
                _attach_method(exc, _PUBLISH, event.channel)
                raise
        elif isinstance(event, events.MethodReceived):
            if isinstance(event.method, commands.Connection.UpdateSecret):
                self._update_secret(event.method)
                return
            channel = self.channels[event.channel] if event.channel else None
            try:
                methods.handle(self, channel, event.method, now_ms)
            except errors.AMQPError as exc:
                _attach_method(exc, event.method, event.channel)
                raise
        else:
            self._handle_lifecycle(event, now_ms)

    def _handle_lifecycle(self, event: Any, now_ms: int) -> None:
        if isinstance(event, events.StartOkReceived):
            self._login(event)
        elif isinstance(event, events.OpenReceived):
            self._open(event.virtual_host)
        elif isinstance(event, events.ChannelOpened):
            self.channels[event.channel] = Channel(self, event.channel)
            self.context.channel_count += 1
            self._update_channel_refusal()
        elif isinstance(event, events.ChannelCloseRequested | events.ChannelCloseConfirmed):
            self._drop_channel(event.channel, now_ms)
        elif isinstance(event, events.ConnectionCloseRequested | events.ConnectionCloseConfirmed):
            self.connection_lost()

    def _update_secret(self, method: commands.Connection.UpdateSecret) -> None:
        """connection.update-secret (OAuth token refresh in pika, the Java and .NET clients).

        RabbitMQ's internal user database answers update-secret-ok and keeps the connection's
        user as it is: the secret proves nothing new to a connection already logged in.
        Hutch does the same; a deleted user's connections are closed anyway.
        """
        log.info("connection %s refreshed its secret (%s)", self.id, method.reason)
        self.proto.send_method(0, commands.Connection.UpdateSecretOk())

    # -- handshake --------------------------------------------------------

    def _login(self, event: events.StartOkReceived) -> None:
        broker = self.context.broker
        user = broker.authenticate(event.username, event.password)
        if (
            user is not None
            and user.name in broker.loopback_users
            and not access.is_loopback(self.peer_host)
        ):
            user = None
        if user is None:
            log.warning("login refused for user %r from %s", event.username, self.peer_host)
            raise errors.login_refused(event.mechanism)
        self.user = user
        self.proto.accept_login()

    def _open(self, vhost_name: str) -> None:
        broker = self.context.broker
        vhost = broker.vhosts.get(vhost_name)
        if vhost is None:
            raise errors.vhost_not_found(vhost_name)
        assert self.user is not None  # noqa: S101 - the protocol orders start-ok before open
        permission = broker.permission(vhost_name, self.user.name)
        if permission is None:
            raise errors.vhost_access_refused(vhost_name, self.user.name)
        self._check_connection_limits(vhost, self.user.name)
        self.vhost = vhost
        self.permission = permission
        self.context.sessions[self.id] = self
        self.context.stats.connections_opened += 1
        self.proto.accept_open()

    # -- limits (model/limits.py) -----------------------------------------

    def _check_connection_limits(self, vhost: VirtualHost, username: str) -> None:
        """The vhost's, then the user's max-connections, as RabbitMQ's reader checks them."""
        sessions = self.context.sessions.values()
        if vhost.limits:
            count = sum(1 for session in sessions if session.vhost is vhost)
            limit = limits.reached(vhost.limits, "max-connections", count)
            if limit is not None:
                raise errors.vhost_connection_limit(vhost.name, username, limit)
        user = self.context.broker.users.get(username)
        if user is not None and user.limits:
            count = sum(1 for session in sessions if _user_name(session) == username)
            limit = limits.reached(user.limits, "max-connections", count)
            if limit is not None:
                raise errors.user_connection_limit(username, limit)

    def _update_channel_refusal(self) -> None:
        """Keep the protocol's channel.open refusal in step with the user's max-channels.

        Limits are read live (an API change applies to open connections), and only users with
        a limit pay for counting their channels across connections.
        """
        refusal = None
        name = self.user.name if self.user is not None else None
        user = self.context.broker.users.get(name) if name is not None else None
        if user is not None and user.limits.get("max-channels") is not None:
            count = sum(
                len(session.channels)
                for session in self.context.sessions.values()
                if _user_name(session) == name
            )
            limit = limits.reached(user.limits, "max-channels", count)
            if limit is not None:
                refusal = (
                    f"number of channels opened for user '{name}' has reached the maximum "
                    f"allowed user limit of ({limit})"
                )
        self.proto.channel_open_refusal = refusal

    # -- permissions ------------------------------------------------------

    def check_permission(self, kind: str, resource_kind: str, name: str) -> None:
        """CN-6: configure/write/read on a queue or exchange; 403 on refusal."""
        key = (kind, resource_kind + "\0" + name)
        allowed = self._permission_cache.get(key)
        if allowed is None:
            permission = self.permission
            resource = name or "amq.default"
            allowed = permission is not None and permission.allows(kind, resource)
            if len(self._permission_cache) > 10_000:
                self._permission_cache.clear()
            self._permission_cache[key] = allowed
        if not allowed:
            vhost = self.vhost.name if self.vhost else ""
            user = self.user.name if self.user else ""
            raise errors.access_refused(
                f"access to {resource_kind} '{name or 'amq.default'}' in vhost "
                f"'{vhost}' refused for user '{user}'"
            )

    def check_write(self, exchange: str) -> None:
        """``check_permission("write", "exchange", ...)``, remembered when it allows."""
        self.check_permission("write", "exchange", exchange)
        writable = self.writable_exchanges
        if len(writable) > 10_000:
            writable.clear()
        writable.add(exchange)

    def check_topic(self, kind: str, exchange: Any, routing_key: str) -> None:
        """RabbitMQ's topic authorisation: on a topic exchange with a topic permission for
        this user, the routing key must match its ``write`` (publish) or ``read`` (bind,
        unbind) regex; no topic permission, or another exchange type, allows. 403 otherwise.
        The cache is keyed by the expanded pattern, so a changed permission is seen at once."""
        if getattr(exchange, "kind", "") != "topic" or self.vhost is None or self.user is None:
            return
        vhost, user = self.vhost.name, self.user.name
        permission = self.context.broker.topic_permission(vhost, user, exchange.name)
        if permission is None:
            return
        pattern = permission.pattern(kind, username=user, vhost=vhost)
        if pattern not in self._topic_matchers:
            if len(self._topic_matchers) > 1_000:
                self._topic_matchers.clear()
            self._topic_matchers[pattern] = access.topic_matcher(pattern)
        matcher = self._topic_matchers[pattern]
        if matcher is None or not matcher.search(routing_key):
            raise errors.access_refused(
                f"access to topic '{routing_key}' in exchange '{exchange.name}' in vhost "
                f"'{vhost}' refused for user '{user}'"
            )

    def use_permission(self, permission: access.Permission) -> None:
        """The user's permissions in this vhost changed: check against the new ones from now."""
        self.permission = permission
        self._permission_cache.clear()
        self.writable_exchanges.clear()

    def belongs_to(self, *, vhost: str | None = None, user: str | None = None) -> bool:
        """Is this an open connection to ``vhost`` (if given) as ``user`` (if given)?"""
        if self.vhost is None or self.user is None:
            return False
        if vhost is not None and self.vhost.name != vhost:
            return False
        return user is None or self.user.name == user

    def capability(self, name: str) -> bool:
        capabilities = self.proto.capabilities
        return bool(capabilities.get(name)) if capabilities else False

    # -- errors -----------------------------------------------------------

    def fail_channel(self, exc: errors.SoftError) -> None:
        channel = getattr(exc, "channel", 0) or 0
        log.info("channel %s error on connection %s: %s", channel, self.id, exc.reply_text)
        if channel == 0:
            self.fail_connection(
                errors.HardError(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id)
            )
            return
        self._drop_channel(channel, self.context.clock())
        self.proto.close_channel(channel, exc)

    def fail_connection(self, exc: errors.AMQPError) -> None:
        log.info("closing connection %s: %s", self.id, exc.reply_text)
        self.proto.close(exc)
        self._release_all()

    def force_close(self, reason: str) -> None:
        """The broker closes this connection (320 CONNECTION_FORCED) and forgets it at once."""
        if self.closed:
            return
        self.fail_connection(errors.connection_forced(reason))
        self.connection_lost()  # nothing it sends from now on reaches the model
        self.context.mark_dirty(self)

    # -- teardown ---------------------------------------------------------

    def _drop_channel(self, number: int, now_ms: int) -> None:
        channel = self.channels.pop(number, None)
        if channel is not None:
            self.context.channel_count -= 1
            channel.close(now_ms)

    def remove_consumer(self, channel: Channel, consumer: Consumer, now_ms: int) -> bool:
        """Cancel ``consumer``; True when a waiting single active consumer took over.

        The caller drains the queue then, after any requeue, as RabbitMQ requeues a closed
        channel's messages before the next active consumer gets any.
        """
        channel.consumers.pop(consumer.tag, None)
        self.proto.forget_consumer(channel.number, consumer.tag)
        queue = consumer.queue
        handed_over = queue.remove_consumer(consumer)
        queue.last_used_ms = now_ms
        if queue.auto_delete and not queue.consumers and not queue.deleted:
            vhost = self.vhost
            if vhost is not None:
                vhost.remove_queue(queue)
        return handed_over

    def resume_deliveries(self, now_ms: int) -> None:
        """Room appeared on the whole connection (socket writable, held bodies released)."""
        if self.closed or self._releasing or not self.writable:
            return
        for channel in list(self.channels.values()):
            channel.drain_consumers(now_ms)

    def _release_all(self) -> None:
        now_ms = self.context.clock()
        self._releasing = True  # a channel's requeue must not deliver to the next one
        for number in list(self.channels):
            self._drop_channel(number, now_ms)
        vhost = self.vhost
        for queue in list(self.exclusive_queues):
            if vhost is not None and not queue.deleted:
                vhost.remove_queue(queue)
        self.exclusive_queues.clear()

    def connection_lost(self) -> None:
        """The socket is gone (or the close handshake finished): release everything."""
        if self.closed:
            return
        self._release_all()
        self.closed = True
        if self.context.sessions.pop(self.id, None) is not None:
            self.context.stats.connections_closed += 1


def _attach_method(exc: errors.AMQPError, method: Any, channel: int) -> None:
    """Fill in which method failed, for the close frame."""
    if not exc.class_id:
        index = getattr(method, "index", 0) or 0
        exc.class_id, exc.method_id = index >> 16, index & 0xFFFF
    if isinstance(exc, errors.SoftError) and not getattr(exc, "channel", 0):
        exc.channel = channel


def _user_name(session: Member) -> str | None:
    return session.user.name if session.user is not None else None
