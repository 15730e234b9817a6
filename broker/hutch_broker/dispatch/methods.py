"""AMQP method handlers: one small function per client method.

Each handler checks permissions, applies the method to the model and sends
the reply through the session's protocol connection.  ``HANDLERS`` maps the
pamqp command class to its function; anything missing is a 540.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from functools import partial
from typing import Any

from pamqp import commands

from hutch_broker.dispatch import declares, publishing, replyto
from hutch_broker.dispatch.channels import Channel, ChannelOwner
from hutch_broker.model import arguments as arguments_mod
from hutch_broker.model import quorum, streamargs
from hutch_broker.model.policymatch import PolicyMatch
from hutch_broker.model.queues import Consumer, Queue
from hutch_broker.model.streams import StreamQueue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors
from hutch_broker.protocol.strings import text as _text

Handler = Callable[[ChannelOwner, Channel, Any, int], None]

publish = publishing.publish
publish_run = publishing.publish_run


def handle(session: ChannelOwner, channel: Channel | None, method: Any, now_ms: int) -> None:
    handler = HANDLERS.get(type(method))
    if handler is None or channel is None:
        raise errors.not_implemented(f"method {type(method).__name__} is not supported")
    handler(session, channel, method, now_ms)


def _reply(session: ChannelOwner, channel: Channel, method: Any, nowait: bool = False) -> None:
    if not nowait:
        session.proto.send_method(channel.number, method)


def _vhost(session: ChannelOwner) -> VirtualHost:
    return session.open_vhost


# -- exchange.* ----------------------------------------------------------


def exchange_declare(
    session: ChannelOwner, channel: Channel, m: commands.Exchange.Declare, now_ms: int
) -> None:
    vhost = _vhost(session)
    if m.exchange == "":
        raise errors.default_exchange_refused()
    if m.passive:
        vhost.get_exchange(m.exchange)
    else:
        session.check_permission("configure", "exchange", m.exchange)
        alternate = (m.arguments or {}).get("alternate-exchange")
        new = m.exchange not in vhost.exchanges and not m.exchange.startswith("amq.")
        if alternate is not None and new:
            # CN-6: a new exchange with an AE needs read on itself and write on the AE.
            arguments_mod.check_exchange_name_type(
                "exchange", m.exchange, vhost.name, "alternate-exchange", alternate
            )
            session.check_permission("read", "exchange", m.exchange)
            session.check_permission("write", "exchange", _text(alternate))

        def finish(matched: PolicyMatch | None, _now_ms: int) -> None:
            exchange, created = vhost.declare_exchange(
                m.exchange,
                m.exchange_type,
                durable=m.durable,
                auto_delete=m.auto_delete,
                internal=m.internal,
                arguments=m.arguments or {},
                matched=matched,
            )
            if created and session.user is not None:
                exchange.declared_by = session.user.name
            _reply(session, channel, commands.Exchange.DeclareOk(), m.nowait)

        # Policy matching within the turn's allowance, or over later turns (dispatch.declares).
        begin = partial(vhost.begin_exchange_match, m.exchange)
        declares.declare(session, channel, m, begin, finish, now_ms)
        return
    _reply(session, channel, commands.Exchange.DeclareOk(), m.nowait)


def exchange_delete(
    session: ChannelOwner, channel: Channel, m: commands.Exchange.Delete, now_ms: int
) -> None:
    if m.exchange == "":
        raise errors.default_exchange_refused()
    if m.exchange.startswith("amq."):
        raise errors.access_refused(
            f"deletion of system exchange '{m.exchange}' in vhost '{_vhost(session).name}' "
            "not allowed"
        )
    session.check_permission("configure", "exchange", m.exchange)
    vhost = _vhost(session)
    exchange = vhost.exchanges.get(m.exchange)
    if exchange is None or (m.if_unused and (exchange.bindings or exchange.incoming)):
        vhost.delete_exchange(m.exchange, if_unused=m.if_unused)  # nothing to do, or refused
        _reply(session, channel, commands.Exchange.DeleteOk(), m.nowait)
        return

    def finish(_now_ms: int) -> None:
        if vhost.exchanges.get(m.exchange) is exchange:  # not gone meanwhile (auto-delete)
            vhost.delete_exchange(m.exchange)
        _reply(session, channel, commands.Exchange.DeleteOk(), m.nowait)

    # Its bindings removed within the turn's allowance, or over later turns (dispatch.declares).
    declares.delete(session, channel, m, exchange, finish, now_ms)


def _exchange_edge(session: ChannelOwner, m: Any) -> tuple[Any, Any]:
    vhost = _vhost(session)
    session.check_permission("write", "exchange", m.destination)
    if m.source == "" or m.destination == "":
        raise errors.default_exchange_refused()
    session.check_permission("read", "exchange", m.source)
    session.check_topic("read", vhost.exchanges.get(m.source), m.routing_key)
    vhost.get_exchange(m.source)  # with both ends missing, RabbitMQ names the source
    return vhost, vhost.get_exchange(m.destination)


def exchange_bind(
    session: ChannelOwner, channel: Channel, m: commands.Exchange.Bind, now_ms: int
) -> None:
    vhost, destination = _exchange_edge(session, m)
    vhost.bind(m.source, destination, m.routing_key, m.arguments or {})
    _reply(session, channel, commands.Exchange.BindOk(), m.nowait)


def exchange_unbind(
    session: ChannelOwner, channel: Channel, m: commands.Exchange.Unbind, now_ms: int
) -> None:
    vhost = _vhost(session)
    session.check_permission("write", "exchange", m.destination)
    if m.source == "" or m.destination == "":
        raise errors.default_exchange_refused()
    session.check_permission("read", "exchange", m.source)
    session.check_topic("read", vhost.exchanges.get(m.source), m.routing_key)
    destination = vhost.exchanges.get(m.destination)
    if m.source in vhost.exchanges and destination is not None:
        vhost.unbind(m.source, destination, m.routing_key, m.arguments or {})
    # Either end gone: nothing to remove, and RabbitMQ answers unbind-ok (idempotent clean-up).
    _reply(session, channel, commands.Exchange.UnbindOk(), m.nowait)


# -- queue.* -------------------------------------------------------------


def _queue(session: ChannelOwner, name: str) -> Queue:
    vhost = _vhost(session)
    queue: Queue = vhost.get_queue(name)
    vhost.check_exclusive(queue, session)
    return queue


def queue_declare(
    session: ChannelOwner, channel: Channel, m: commands.Queue.Declare, now_ms: int
) -> None:
    vhost = _vhost(session)
    if m.queue == replyto.PSEUDO_QUEUE or m.queue.startswith(replyto.PREFIX):
        reply = replyto.declare_ok(m.queue, vhost.name, session.context.replies)
        _reply(session, channel, reply, m.nowait)
        return
    if m.passive:
        queue = _queue(session, m.queue)
        queue.last_used_ms = now_ms
        reply = commands.Queue.DeclareOk(queue.name, _ready(queue), queue.consumer_count())
        _reply(session, channel, reply, m.nowait)
        return
    name = m.queue
    if name:
        session.check_permission("configure", "queue", name)
        if name not in vhost.queues:
            _check_dead_letter_permissions(session, vhost.name, name, m.arguments or {})

    def finish(matched: PolicyMatch | None, at_ms: int) -> None:
        queue, created = vhost.declare_queue(
            name,
            durable=m.durable,
            exclusive_owner=session if m.exclusive else None,
            auto_delete=m.auto_delete,
            arguments=m.arguments or {},
            now_ms=at_ms,
            default_type=True,
            matched=matched,
        )
        if created and m.exclusive:
            session.exclusive_queues.add(queue)
        reply = commands.Queue.DeclareOk(queue.name, _ready(queue), queue.consumer_count())
        _reply(session, channel, reply, m.nowait)

    # Policy matching within the turn's allowance, or over later turns (dispatch.declares).
    begin = partial(
        vhost.begin_queue_match,
        name,
        durable=m.durable,
        exclusive=m.exclusive,
        auto_delete=m.auto_delete,
        arguments=m.arguments or {},
        default_type=True,
    )
    declares.declare(session, channel, m, begin, finish, now_ms)


def _ready(queue: Queue) -> int:
    """A declare-ok's message count: ready messages; 0 for a stream, as 3.10.8 answers."""
    return 0 if isinstance(queue, StreamQueue) else queue.ready_count


def _check_dead_letter_permissions(
    session: ChannelOwner, vhost: str, queue: str, arguments: dict[str, Any]
) -> None:
    """CN-6: a new queue with a DLX needs read on itself and write on the DLX, as RabbitMQ's
    channel checks at declare (dead-lettering itself checks nothing, DLX-2)."""
    arguments_mod.check_dead_letter_exchange_type(queue, vhost, arguments)
    dlx = arguments.get("x-dead-letter-exchange")
    if dlx is not None:
        session.check_permission("read", "queue", queue)
        session.check_permission("write", "exchange", _text(dlx))


def _queue_edge(session: ChannelOwner, m: Any) -> Queue:
    """RabbitMQ's order: permissions, then the source exchange, then the queue."""
    session.check_permission("write", "queue", m.queue)
    if m.exchange == "":
        raise errors.default_exchange_refused()
    session.check_permission("read", "exchange", m.exchange)
    session.check_topic("read", _vhost(session).exchanges.get(m.exchange), m.routing_key)
    _vhost(session).get_exchange(m.exchange)
    return _queue(session, m.queue)


def queue_bind(
    session: ChannelOwner, channel: Channel, m: commands.Queue.Bind, now_ms: int
) -> None:
    queue = _queue_edge(session, m)
    _vhost(session).bind(m.exchange, queue, m.routing_key, m.arguments or {})
    _reply(session, channel, commands.Queue.BindOk(), m.nowait)


def queue_unbind(
    session: ChannelOwner, channel: Channel, m: commands.Queue.Unbind, now_ms: int
) -> None:
    vhost = _vhost(session)
    session.check_permission("write", "queue", m.queue)
    if m.exchange == "":
        raise errors.default_exchange_refused()
    session.check_permission("read", "exchange", m.exchange)
    session.check_topic("read", vhost.exchanges.get(m.exchange), m.routing_key)
    queue = vhost.queues.get(m.queue)
    if queue is not None:
        vhost.check_exclusive(queue, session)
        if m.exchange in vhost.exchanges:
            vhost.unbind(m.exchange, queue, m.routing_key, m.arguments or {})
    # Either end gone: nothing to remove, and RabbitMQ answers unbind-ok (idempotent clean-up).
    _reply(session, channel, commands.Queue.UnbindOk())


def queue_purge(
    session: ChannelOwner, channel: Channel, m: commands.Queue.Purge, now_ms: int
) -> None:
    queue = _queue(session, m.queue)
    session.check_permission("read", "queue", m.queue)
    count = queue.purge()
    _reply(session, channel, commands.Queue.PurgeOk(count), m.nowait)


def queue_delete(
    session: ChannelOwner, channel: Channel, m: commands.Queue.Delete, now_ms: int
) -> None:
    vhost = _vhost(session)
    # Before the lookup, as RabbitMQ does: a refusal must not tell whether the queue exists.
    session.check_permission("configure", "queue", m.queue)
    queue = vhost.queues.get(m.queue)
    if queue is None:
        _reply(session, channel, commands.Queue.DeleteOk(0), m.nowait)
        return
    vhost.check_exclusive(queue, session)
    if (m.if_unused and queue.consumers) or (m.if_empty and queue.ready_count):
        vhost.delete_queue(m.queue, if_unused=m.if_unused, if_empty=m.if_empty)  # refuses

    def finish(_now_ms: int) -> None:
        count = 0
        if vhost.queues.get(m.queue) is queue:  # conditions were checked when it began
            count = vhost.delete_queue(m.queue)
        session.exclusive_queues.discard(queue)
        _reply(session, channel, commands.Queue.DeleteOk(count), m.nowait)

    # Its bindings removed within the turn's allowance, or over later turns (dispatch.declares).
    declares.delete(session, channel, m, queue, finish, now_ms)


# -- basic.* -------------------------------------------------------------


def basic_qos(session: ChannelOwner, channel: Channel, m: commands.Basic.Qos, now_ms: int) -> None:
    if m.prefetch_size:
        raise errors.not_implemented(f"prefetch_size!=0 ({m.prefetch_size})")
    if m.global_:
        channel.prefetch_count = m.prefetch_count
    else:
        channel.consumer_prefetch = m.prefetch_count
    _reply(session, channel, commands.Basic.QosOk())
    channel.drain_consumers(now_ms)


def _consumer_tag() -> str:
    return "amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def basic_consume(
    session: ChannelOwner, channel: Channel, m: commands.Basic.Consume, now_ms: int
) -> None:
    if m.queue == replyto.PSEUDO_QUEUE:
        _consume_replies(session, channel, m)
        return
    queue = _queue(session, m.queue)
    session.check_permission("read", "queue", m.queue)
    offset_spec = None
    if isinstance(queue, StreamQueue):
        offset_spec = streamargs.check_consume(
            queue.name,
            queue.vhost,
            prefetch=channel.consumer_prefetch,
            no_ack=m.no_ack,
            arguments=m.arguments or {},
        )
    arguments_mod.check_consumer_arguments(queue.name, queue.vhost, m.arguments or {})
    if queue.quorum:
        quorum.check_consume(queue.name, queue.vhost, global_prefetch=channel.prefetch_count)
    tag = m.consumer_tag or _consumer_tag()
    if tag in channel.consumers:
        raise errors.not_allowed(f"attempt to reuse consumer tag '{tag}'")
    if queue.consumers and (m.exclusive or any(c.exclusive for c in queue.consumers)):
        raise errors.access_refused(
            f"queue '{queue.name}' in vhost '{queue.vhost}' in exclusive use"
        )
    consumer = Consumer(
        tag,
        queue,
        channel,
        no_ack=m.no_ack,
        exclusive=m.exclusive,
        prefetch=channel.consumer_prefetch,
        arguments=m.arguments or {},
    )
    channel.consumers[tag] = consumer
    if isinstance(queue, StreamQueue) and offset_spec is not None:
        queue.start_cursor(consumer, offset_spec, now_ms)
    queue.add_consumer(consumer)
    queue.last_used_ms = now_ms
    _reply(session, channel, commands.Basic.ConsumeOk(tag), m.nowait)
    queue.drain(now_ms)


def _consume_replies(session: ChannelOwner, channel: Channel, m: commands.Basic.Consume) -> None:
    tag = m.consumer_tag or _consumer_tag()
    if tag in channel.consumers:
        raise errors.not_allowed(f"attempt to reuse consumer tag '{tag}'")
    session.context.replies.consume(channel, tag, no_ack=m.no_ack)
    _reply(session, channel, commands.Basic.ConsumeOk(tag), m.nowait)


def basic_cancel(
    session: ChannelOwner, channel: Channel, m: commands.Basic.Cancel, now_ms: int
) -> None:
    reply_consumer = channel.reply_consumer
    if reply_consumer is not None and reply_consumer[0] == m.consumer_tag:
        session.context.replies.cancel(channel)
        _reply(session, channel, commands.Basic.CancelOk(m.consumer_tag), m.nowait)
        return
    consumer = channel.consumers.get(m.consumer_tag or "")
    handed_over = consumer is not None and session.remove_consumer(channel, consumer, now_ms)
    _reply(session, channel, commands.Basic.CancelOk(m.consumer_tag), m.nowait)
    if consumer is not None and handed_over:
        consumer.queue.drain(now_ms)  # the next single active consumer takes over


def basic_get(session: ChannelOwner, channel: Channel, m: commands.Basic.Get, now_ms: int) -> None:
    queue = _queue(session, m.queue)
    session.check_permission("read", "queue", m.queue)
    entry = queue.get(now_ms, no_ack=m.no_ack)
    if entry is None:
        session.proto.send_method(channel.number, commands.Basic.GetEmpty())
        session.context.stats.deliveries["get_empty"] += 1
        return
    tag = channel.record_get(queue, entry, no_ack=m.no_ack)
    message = entry.message
    session.proto.send_get_ok(
        channel.number,
        tag,
        entry.redelivered,
        message.exchange,
        message.routing_key,
        queue.ready_count,
        message.raw_properties,
        message.body,
    )
    channel.got(entry, no_ack=m.no_ack)
    stats = session.context.stats
    stats.delivers += 1
    stats.deliveries["get_no_ack" if m.no_ack else "get"] += 1
    if entry.redelivered:
        stats.redelivers += 1


def basic_ack(session: ChannelOwner, channel: Channel, m: commands.Basic.Ack, now_ms: int) -> None:
    if channel.transactional:
        channel.tx_acks.append(("ack", m.delivery_tag, m.multiple, False))
        return
    channel.settle(m.delivery_tag, m.multiple, now_ms)


def basic_reject(
    session: ChannelOwner, channel: Channel, m: commands.Basic.Reject, now_ms: int
) -> None:
    _refuse_stream_returns(channel, m.delivery_tag or 0, False)
    if channel.transactional:
        channel.tx_acks.append(("reject", m.delivery_tag or 0, False, m.requeue))
        return
    channel.reject(m.delivery_tag or 0, False, m.requeue, now_ms)


def basic_nack(
    session: ChannelOwner, channel: Channel, m: commands.Basic.Nack, now_ms: int
) -> None:
    _refuse_stream_returns(channel, m.delivery_tag, m.multiple)
    if channel.transactional:
        channel.tx_acks.append(("reject", m.delivery_tag, m.multiple, m.requeue))
        return
    channel.reject(m.delivery_tag, m.multiple, m.requeue, now_ms)


def _refuse_stream_returns(channel: Channel, tag: int, multiple: bool) -> None:
    """basic.nack and basic.reject of a stream's delivery close the connection (540, 3.10.8)."""
    unacked = channel.unacked
    if multiple:
        named = list(unacked.queues(tag))
    else:
        found = unacked.queue_of(tag)
        named = [found] if found is not None else []
    for queue in named:
        if isinstance(queue, StreamQueue):
            raise streamargs.unsupported("basic.nack and basic.reject", queue.name, queue.vhost)


def basic_recover(
    session: ChannelOwner,
    channel: Channel,
    m: commands.Basic.Recover | commands.Basic.RecoverAsync,
    now_ms: int,
) -> None:
    if not m.requeue:
        raise errors.not_implemented("requeue=false")
    if any(isinstance(queue, StreamQueue) for queue in channel.unacked.queues()):
        raise streamargs.internal_error()  # 3.10.8 fails on a stream's deliveries: 541
    channel.requeue_all(now_ms)
    if isinstance(m, commands.Basic.Recover):
        _reply(session, channel, commands.Basic.RecoverOk())


# -- channel.flow, confirm.*, tx.* ---------------------------------------


def channel_flow(
    session: ChannelOwner, channel: Channel, m: commands.Channel.Flow, now_ms: int
) -> None:
    """RabbitMQ (3.10.8 and 4.x) confirms ``active=true`` and closes the connection with 540 on
    ``active=false``; so does Hutch, so no client comes to rely on a pause only Hutch offers."""
    if not m.active:
        raise errors.not_implemented("active=false")
    _reply(session, channel, commands.Channel.FlowOk(True))


def confirm_select(
    session: ChannelOwner, channel: Channel, m: commands.Confirm.Select, now_ms: int
) -> None:
    if channel.transactional:
        raise errors.precondition_failed("cannot switch from tx to confirm mode")
    channel.confirm_mode = True
    _reply(session, channel, commands.Confirm.SelectOk(), m.nowait)


def tx_select(session: ChannelOwner, channel: Channel, m: commands.Tx.Select, now_ms: int) -> None:
    if channel.confirm_mode:
        raise errors.precondition_failed("cannot switch from confirm to tx mode")
    channel.transactional = True
    _reply(session, channel, commands.Tx.SelectOk())


def tx_commit(session: ChannelOwner, channel: Channel, m: commands.Tx.Commit, now_ms: int) -> None:
    if not channel.transactional:
        raise errors.precondition_failed("channel is not transactional")
    publishes, channel.tx_publishes = channel.tx_publishes, []
    acks, channel.tx_acks = channel.tx_acks, []

    def settle_acks(generation: int, _rejected: bool) -> None:
        for kind, tag, multiple, requeue in acks:
            if kind == "ack":
                channel.settle(tag, multiple, now_ms)
            else:
                channel.reject(tag, multiple, requeue, now_ms)
        channel.add_commit(generation)  # commit-ok once its persistent messages are on disk

    # Routed in order within the loop turn's meter, or over later turns (dispatch.turns).
    publishing.publish_in_order(session, channel, publishes, settle_acks)


def tx_rollback(
    session: ChannelOwner, channel: Channel, m: commands.Tx.Rollback, now_ms: int
) -> None:
    if not channel.transactional:
        raise errors.precondition_failed("channel is not transactional")
    channel.tx_publishes.clear()
    channel.tx_acks.clear()
    _reply(session, channel, commands.Tx.RollbackOk())


HANDLERS: dict[type, Handler] = {  # each handler takes the method of its key
    commands.Exchange.Declare: exchange_declare,
    commands.Exchange.Delete: exchange_delete,
    commands.Exchange.Bind: exchange_bind,
    commands.Exchange.Unbind: exchange_unbind,
    commands.Queue.Declare: queue_declare,
    commands.Queue.Bind: queue_bind,
    commands.Queue.Unbind: queue_unbind,
    commands.Queue.Purge: queue_purge,
    commands.Queue.Delete: queue_delete,
    commands.Basic.Qos: basic_qos,
    commands.Basic.Consume: basic_consume,
    commands.Basic.Cancel: basic_cancel,
    commands.Basic.Get: basic_get,
    commands.Basic.Ack: basic_ack,
    commands.Basic.Reject: basic_reject,
    commands.Basic.Nack: basic_nack,
    commands.Basic.Recover: basic_recover,
    commands.Basic.RecoverAsync: basic_recover,
    commands.Channel.Flow: channel_flow,
    commands.Confirm.Select: confirm_select,
    commands.Tx.Select: tx_select,
    commands.Tx.Commit: tx_commit,
    commands.Tx.Rollback: tx_rollback,
}
