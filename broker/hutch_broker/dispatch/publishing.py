"""The publish path (ML-8): route (and return) -> enqueue or deliver -> confirm.

This is the broker's hottest code: one call per message.  It avoids decoding
the content header unless routing needs it (CC/BCC sender-selected
distribution, headers exchanges), and records publisher confirms with the
durability generation their store writes need (P-3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hutch_broker.dispatch import flow
from hutch_broker.dispatch.channels import Channel
from hutch_broker.model.exchanges import Exchange
from hutch_broker.model.messages import Message
from hutch_broker.model.queues import PUBLISH_REJECTED, PUBLISH_SYNC
from hutch_broker.protocol import errors, properties, rewrite

if TYPE_CHECKING:
    from hutch_broker.dispatch.sessions import Session

NO_ROUTE = 312


def publish(session: Session, channel: Channel, event: Any, now_ms: int) -> None:
    """basic.publish as assembled by the protocol (method + header + body)."""
    vhost = session.vhost
    assert vhost is not None  # noqa: S101 - publishing only after connection.open
    exchange = vhost.exchanges.get(event.exchange)
    if exchange is None:
        raise errors.not_found(f"no exchange '{event.exchange}' in vhost '{vhost.name}'")
    if exchange.internal:
        raise errors.access_refused(
            f"cannot publish to internal exchange '{event.exchange}' in vhost '{vhost.name}'"
        )
    session.check_permission("write", "exchange", event.exchange)
    _check_expiration(event.raw_properties)
    session.publishes += 1
    context = session.context
    context.stats.publishes += 1
    context.ingress_bytes += len(event.body)
    if channel.transactional:
        channel.tx_publishes.append(event)
        return
    route_and_enqueue(session, channel, event, now_ms, exchange=exchange)


def _check_expiration(raw_properties: bytes) -> None:
    """TTL-2: a malformed per-message TTL is a 406 on the publishing channel."""
    if not properties.has_expiration(raw_properties):
        return
    value = properties.expiration(raw_properties)
    if value is None:
        return
    # Parsed as Erlang's string:to_integer, as RabbitMQ does: an optional sign, digits, and
    # the leftover checked before the range ("-1x" is a leftover, "+5" and "-0" are fine).
    sign = 1 if value[:1] in ("+", "-") else 0
    digits = len(value) - sign - len(value[sign:].lstrip("0123456789"))
    if digits == 0:
        raise errors.precondition_failed(f"invalid expiration '{value}': no_integer")
    if sign + digits < len(value):
        raise errors.precondition_failed(
            f"invalid expiration '{value}': {{leftover_string,\"{value[sign + digits :]}\"}}"
        )
    number = int(value)
    if number < 0:
        raise errors.precondition_failed(
            f"invalid expiration '{value}': {{value_negative,{number}}}"
        )
    if number > 315_360_000_000:
        raise errors.precondition_failed(
            f"invalid expiration '{value}': {{value_too_large,{number}}}"
        )


def routing_keys(message: Message) -> list[str]:
    """The routing key plus CC and BCC header keys (EX-4, sender-selected distribution)."""
    keys = [message.routing_key]
    if b"CC" not in message.raw_properties:
        return keys
    headers = message.headers()
    for name in ("CC", "BCC"):
        extra = headers.get(name)
        if isinstance(extra, list):
            keys.extend(_text(key) for key in extra if isinstance(key, str | bytes))
    return keys


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def route_and_enqueue(
    session: Session,
    channel: Channel,
    event: Any,
    now_ms: int,
    *,
    exchange: Exchange | None = None,
) -> None:
    """Route and enqueue one publish; a tx commit passes no exchange (it may be gone by now)."""
    vhost = session.vhost
    assert vhost is not None  # noqa: S101
    if exchange is None:
        exchange = vhost.exchanges.get(event.exchange)
    raw_properties = event.raw_properties
    context = session.context
    if context.stamp_message_id and not rewrite.has_message_id(raw_properties):
        raw_properties = rewrite.with_message_id(raw_properties, context.next_message_id())
    message = Message(event.exchange, event.routing_key, raw_properties, event.body)
    queues = [] if exchange is None else vhost.route(exchange, routing_keys(message), message)
    if queues and b"BCC" in message.raw_properties and "BCC" in message.headers():
        message = _strip_bcc(message)
    if b"x-death" in raw_properties or b"-death-" in raw_properties:
        message.foreign_deaths = True
    generation = 0
    rejected = False
    if not queues:
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
            context.stats.returns += 1
    else:
        for queue in queues:
            outcome = queue.publish(message, now_ms)
            if outcome == PUBLISH_SYNC:
                generation = context.write_generation
                context.sync_requested = True
            elif outcome == PUBLISH_REJECTED:
                rejected = True
            if queue.consumers and (queue._fresh or queue._requeued):
                queue.drain(now_ms)
                if flow.under_pressure(queue):
                    session.pressure.append(queue)
    if channel.confirm_mode:
        channel.add_confirm(channel.next_publish_seq(), generation, rejected)
        context.request_flush()


def _strip_bcc(message: Message) -> Message:
    """BCC never reaches consumers (EX-4); one of the few places a message changes."""
    decoded = properties.decode_properties(message.raw_properties)
    headers = dict(decoded.get("headers") or {})
    headers.pop("BCC", None)
    decoded["headers"] = headers
    raw = properties.encode_properties(**decoded)
    return Message(
        message.exchange, message.routing_key, raw, message.body, persistent=message.persistent
    )
