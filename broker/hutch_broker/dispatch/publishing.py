"""basic.publish over AMQP: checks, then the model's one publish operation, then AMQP's extras.

The model (``model.publishes``) routes, stamps, counts and enqueues, for HTTP publishes too.
What only AMQP has is added here: ``basic.return`` for an unroutable mandatory message,
publisher flow control when a queue with consumers backs up, and the publisher confirm,
which waits for the group commit when the publish wrote a durable record
(``dispatch.commits``).

Routing is metered (``dispatch.turns``): a publish whose routing does not fit in what the
loop turn has left is parked, its connection stops reading and processing frames, and the
routing goes on a slice per turn; once routed, it is enqueued, confirmed or returned as
if it had been routed at once, and the connection picks up its next frame.  A
transaction's commit routes its publishes the same way, in order, before its acks and
``tx.commit-ok``.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable
from functools import partial

from hutch_broker.dispatch import replyto
from hutch_broker.dispatch.channels import Channel, ChannelOwner
from hutch_broker.dispatch.commits import NOT_DURABLE
from hutch_broker.dispatch.flow import HIGH_WATER
from hutch_broker.dispatch.turns import FLOOR
from hutch_broker.model import budgets, publishes
from hutch_broker.model.exchanges import Exchange
from hutch_broker.model.messages import Message
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors, events

NO_ROUTE = 312

log = logging.getLogger(__name__)


def publish(
    session: ChannelOwner, channel: Channel, event: events.PublishReceived, now_ms: int
) -> None:
    """basic.publish as assembled by the protocol (method + header + body).

    One call per message: the checks every publish passes (the vhost open, the write
    permission already granted, no reply-to flag) are read inline and call out only when
    they have something to do.
    """
    vhost = session.vhost or session.open_vhost  # set at connection.open, else it raises
    exchange = _exchange(session, vhost, event.exchange, event.routing_key)
    raw = event.raw_properties
    message = Message(event.exchange, event.routing_key, raw, event.body)
    # The expiry flag read once, by the Message, for every queue it reaches too.
    if message.expires or raw[1] & publishes.USER_ID_FLAG:
        _check_claims(session, raw)
    if raw[0] & 0x02:  # the reply_to flag (0x0200): stamp_reply_to's own first test
        stamped = replyto.stamp_reply_to(channel, raw)
        if stamped is not raw:  # a direct reply-to request: its reply address filled in
            event.raw_properties = stamped
            message = message.with_properties(stamped)
    session.publishes += 1
    context = session.context
    context.stats.publishes += 1
    context.ingress_bytes += len(event.body)
    if channel.transactional:
        channel.tx_publishes.append(event)
        return
    if not event.exchange and event.routing_key.startswith(replyto.PREFIX):
        generation, rejected = _direct_reply(session, channel, event), False
    else:
        # Routed now if it fits in the turn's meter, else parked.  The hot path: one call
        # into the model, and the turn's meter topped up here (``Turns.inline_meter``).
        meter = context.turns.meter
        if meter.left < FLOOR:  # noqa: PLR1730 - max() is one more call per message
            meter.left = FLOOR
        outcome = publishes.publish_within(
            vhost,
            exchange,
            message,
            now_ms,
            meter=meter,
            message_ids=context.next_message_id if context.stamp_message_id else None,
        )
        if isinstance(outcome, publishes.PendingPublish):
            _park(session, channel, event, outcome)
            return
        queues = outcome.queues
        if len(queues) == 1 and not outcome.wrote:  # _settle's common case, inline
            queue = queues[0]
            if queue.ready_count > HIGH_WATER and context.flow.under_pressure(queue):
                session.pressure.append(queue)
            generation, rejected = NOT_DURABLE, outcome.rejected
        else:
            generation, rejected = _settle(session, channel, event, outcome)
    if channel.confirm_mode:
        channel.add_confirm(generation, nack=rejected)


def publish_run(
    session: ChannelOwner, channel: Channel, run: events.PublishRun, now_ms: int
) -> int:
    """A run of repeated publishes on one channel (``events.PublishRun``): ``publish`` for
    each message in order, until one leaves the connection parked (routed over later turns)
    or puts a queue under flow pressure, after which the connection takes no more until the
    pressure or the parking ends. Returns how many it took; the session gives the rest back
    to the protocol (``Connection.unread``). A message refused raises as ``publish`` does, and
    the rest of the run is dropped with it: the refusal closes the channel (or the
    connection), which drops what the client sent on it after the refused message anyway.

    The exchange's checks (the write permission, its existence, internal, the topic
    permission) depend only on the exchange and the routing key, the same for the whole run,
    so they are made once; per message, ``publish``'s common case is written out here: a
    call and the per-event work of the session's loop and the protocol's read per message
    were a quarter of the queued publish's CPU (docs/bench/profile.md). A message of an
    unusual kind (a reply-to flag, a channel in a transaction, a direct reply) goes through
    ``publish`` itself.
    """
    name, routing_key = run.exchange, run.routing_key
    vhost = session.vhost or session.open_vhost
    taken = 0
    exchange = _exchange(session, vhost, name, routing_key)
    context = session.context
    stats, meter, flow, pressure = (
        context.stats,
        context.turns.meter,
        context.flow,
        session.pressure,
    )
    message_ids = context.next_message_id if context.stamp_message_id else None
    plain = not channel.transactional and (name or not routing_key.startswith(replyto.PREFIX))
    confirm_mode = channel.confirm_mode
    for raw, body in zip(run.raws, run.bodies, strict=True):
        taken += 1
        if not plain or raw[0] & 0x02:  # publish's own branches for these
            publish(session, channel, run.message(taken - 1), now_ms)
            if session.parked or pressure:
                break
            continue
        message = Message(name, routing_key, raw, body)
        if message.expires or raw[1] & publishes.USER_ID_FLAG:
            _check_claims(session, raw)
        session.publishes += 1
        stats.publishes += 1
        context.ingress_bytes += len(body)
        if meter.left < FLOOR:  # noqa: PLR1730 - max() is one more call per message
            meter.left = FLOOR
        outcome = publishes.publish_within(
            vhost, exchange, message, now_ms, meter=meter, message_ids=message_ids
        )
        if isinstance(outcome, publishes.PendingPublish):
            _park(session, channel, run.message(taken - 1), outcome)
            break
        queues = outcome.queues
        if len(queues) == 1 and not outcome.wrote:  # _settle's common case, inline
            queue = queues[0]
            if queue.ready_count > HIGH_WATER and flow.under_pressure(queue):
                pressure.append(queue)
            generation, rejected = NOT_DURABLE, outcome.rejected
        else:
            generation, rejected = _settle(session, channel, run.message(taken - 1), outcome)
        if confirm_mode:
            channel.add_confirm(generation, nack=rejected)
        if pressure:
            break
    return taken


def _exchange(session: ChannelOwner, vhost: VirtualHost, name: str, routing_key: str) -> Exchange:
    """The exchange a publish names, if the publisher may publish there with this routing key.

    The write permission first, as RabbitMQ asks it: a user who may not write there is
    refused for that, whether the exchange is missing or internal (no 404 telling them).
    """
    if name not in session.writable_exchanges:  # check_permission's, memoised
        session.check_write(name)
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        raise errors.not_found(f"no exchange '{name}' in vhost '{vhost.name}'")
    if exchange.internal:
        raise errors.access_refused(
            f"cannot publish to internal exchange '{name}' in vhost '{vhost.name}'"
        )
    if exchange.kind == "topic":  # topic permissions apply to nothing else
        session.check_topic("write", exchange, routing_key)
    return exchange


def _check_claims(session: ChannelOwner, raw: bytes) -> None:
    """The properties RabbitMQ checks next, in its order (CN-7, TTL-2): a user_id must name
    the publisher (or they are an impersonator), then an expiration must be a valid TTL."""
    if raw[1] & publishes.USER_ID_FLAG:
        user = session.user
        publishes.check_user_id(raw, user.name if user else "", user.tags if user else ())
    publishes.check_expiration(raw)


def _park(
    session: ChannelOwner,
    channel: Channel,
    event: events.PublishReceived,
    pending: publishes.PendingPublish,
) -> None:
    """The publish goes on over later turns; its connection reads nothing until it is done."""
    job = ParkedPublishes(session, channel, (), partial(_confirm, channel))
    job.current, job.pending = event, pending
    session.park_reading()
    session.context.turns.park(job)


def _confirm(channel: Channel, generation: int, rejected: bool) -> None:
    if channel.confirm_mode:
        channel.add_confirm(generation, nack=rejected)


Finish = Callable[[int, bool], None]  # (write generation to wait for, a queue refused one)


class ParkedPublishes:
    """Publishes of one channel routed in order over as many loop turns as they need.

    ``finish`` runs once every one is enqueued: the confirm of a parked ``basic.publish``,
    or a transaction's acks and ``tx.commit-ok``.  The connection reads nothing meanwhile.
    """

    def __init__(
        self,
        session: ChannelOwner,
        channel: Channel,
        waiting: Iterable[events.PublishReceived],
        finish: Finish,
    ) -> None:
        self.session = session
        self.channel = channel
        self.waiting = collections.deque(waiting)
        self.finish = finish
        self.current: events.PublishReceived | None = None
        self.pending: publishes.PendingPublish | None = None
        self.generation = NOT_DURABLE
        self.rejected = False

    def advance(self, meter: budgets.Meter) -> bool:
        """``dispatch.turns.Parked``: go on while ``meter`` lasts; True when done."""
        session = self.session
        if session.closed:
            return True  # the connection went: nothing was confirmed, nothing to finish
        try:
            if not self.run(meter):
                return False
        except Exception:  # as data_received does for a publish routed at once
            log.exception("internal error on connection %s", getattr(session, "id", "?"))
            session.fail_connection(errors.internal_error("internal error"))
        session.resume_parked()  # reads on: the rest of its frames, or the close-ok
        return True

    def run(self, meter: budgets.Meter) -> bool:
        """Route and enqueue in order while ``meter`` lasts; True once all are finished."""
        while True:
            pending, event = self.pending, self.current
            if pending is not None and event is not None:
                if not pending.advance(meter):
                    return False
                self.pending = self.current = None
                self._settled(event, pending.finish(self.session.context.clock()))
            if not self.waiting:
                self.finish(self.generation, self.rejected)
                return True
            self._start(self.waiting.popleft(), meter)

    def _start(self, event: events.PublishReceived, meter: budgets.Meter) -> None:
        session, channel = self.session, self.channel
        if not event.exchange and event.routing_key.startswith(replyto.PREFIX):
            self.generation = max(self.generation, _direct_reply(session, channel, event))
            return
        vhost = session.open_vhost
        outcome = _publish_within(
            session,
            event,
            vhost.exchanges.get(event.exchange),
            meter,  # None if it went
        )
        if isinstance(outcome, publishes.PendingPublish):
            self.current, self.pending = event, outcome
        else:
            self._settled(event, outcome)

    def _settled(self, event: events.PublishReceived, outcome: publishes.Published) -> None:
        generation, rejected = _settle(self.session, self.channel, event, outcome)
        self.generation = max(self.generation, generation)
        self.rejected = self.rejected or rejected


class RoutedLater:
    """A publish from outside AMQP (the management API) routed over later loop turns:
    ``done`` gets its outcome, unless the requester gave up first (``abandoned``)."""

    def __init__(
        self,
        pending: publishes.PendingPublish,
        clock: Callable[[], int],
        done: Callable[[publishes.Published], object],
        abandoned: Callable[[], bool],
        failed: Callable[[BaseException], object],
    ) -> None:
        self.pending = pending
        self.clock = clock
        self.done = done
        self.abandoned = abandoned
        self.failed = failed

    def advance(self, meter: budgets.Meter) -> bool:
        """``dispatch.turns.Parked``; an abandoned publish is dropped, never enqueued."""
        if self.abandoned():
            return True
        try:
            if not self.pending.advance(meter):
                return False
            outcome = self.pending.finish(self.clock())
        except Exception as exc:  # noqa: BLE001 - the requester gets it (a 500); the loop goes on
            self.failed(exc)
            return True
        self.done(outcome)
        return True


def publish_in_order(
    session: ChannelOwner,
    channel: Channel,
    waiting: Iterable[events.PublishReceived],
    finish: Finish,
) -> None:
    """A transaction's publishes, routed within the turn's meter; parked if they need more."""
    job = ParkedPublishes(session, channel, waiting, finish)
    if not job.run(session.context.turns.inline_meter()):
        session.park_reading()
        session.context.turns.park(job)


def _publish_within(
    session: ChannelOwner,
    event: events.PublishReceived,
    exchange: Exchange | None,
    meter: budgets.Meter,
) -> publishes.Published | publishes.PendingPublish:
    context = session.context
    message = Message(event.exchange, event.routing_key, event.raw_properties, event.body)
    return publishes.publish_within(
        session.open_vhost,
        exchange,
        message,
        context.clock(),
        meter=meter,
        message_ids=context.next_message_id if context.stamp_message_id else None,
    )


def _settle(
    session: ChannelOwner,
    channel: Channel,
    event: events.PublishReceived,
    outcome: publishes.Published,
) -> tuple[int, bool]:
    """AMQP's side of a routed publish: return or drop, flow pressure, the write to wait for."""
    context = session.context
    if not outcome.queues:
        _unroutable(session, channel, event)
        return NOT_DURABLE, False
    flow = context.flow
    for queue in outcome.queues:
        # under_pressure's own first test, inline: a queue at or under HIGH_WATER never is.
        if queue.ready_count > HIGH_WATER and flow.under_pressure(queue):
            session.pressure.append(queue)
    generation = context.commits.wrote() if outcome.wrote else NOT_DURABLE
    return generation, outcome.rejected


def _unroutable(session: ChannelOwner, channel: Channel, event: events.PublishReceived) -> None:
    if event.mandatory:
        session.proto.send_return(
            channel.number,
            NO_ROUTE,
            "NO_ROUTE",
            event.exchange,
            event.routing_key,
            event.raw_properties,
            event.body,
        )
        session.context.stats.returns += 1
    else:
        session.context.stats.drops_unroutable += 1


def _direct_reply(session: ChannelOwner, channel: Channel, event: events.PublishReceived) -> int:
    """A reply to ``amq.rabbitmq.reply-to.<token>``: straight to the requester, or unroutable."""
    context = session.context
    sent = replyto.send_reply(
        context.replies,
        event.routing_key,
        event.raw_properties,
        event.body,
        message_ids=context.next_message_id if context.stamp_message_id else None,
    )
    if not sent:
        _unroutable(session, channel, event)  # its channel is gone: dropped, as RabbitMQ does
    return NOT_DURABLE
