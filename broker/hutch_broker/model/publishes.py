"""One publish operation for every way a message enters the broker (ML-8).

``basic.publish`` (and a transaction's commit) and the management API's
``POST /api/exchanges/{vhost}/{name}/publish`` route and enqueue through ``publish`` here,
so they cannot drift apart: the same message-id stamping, CC/BCC handling, ``x-death``
flagging, exchange and queue counters, enqueue or direct delivery, and the same report of
what happened. Each front end adds only its own protocol: AMQP adds confirms, returns and
flow control (``dispatch.publishing``), HTTP its JSON reply (``admin.messaging``).

This is the broker's hottest code, one call per message: it decodes the content header only
when routing needs it (CC/BCC, headers exchanges).

``publish_within`` is the same operation for a caller that can wait (``basic.publish``):
when routing would overdraw its step meter it returns a ``PendingPublish`` instead, whose
routing goes on a slice at a time (``budgets``, ``routing.route_steps``) and which enqueues
once routed, so one publish's routing never holds the event loop for long.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hutch_broker.model import budgets, routing
from hutch_broker.model.messages import Message
from hutch_broker.model.queues import PUBLISH_REJECTED, PUBLISH_SYNC, Queue
from hutch_broker.protocol import errors, properties, rewrite
from hutch_broker.protocol.strings import text as _text

if TYPE_CHECKING:
    from hutch_broker.model.exchanges import Exchange
    from hutch_broker.model.vhosts import VirtualHost

MAX_EXPIRATION_MS = 315_360_000_000  # ten years, RabbitMQ's cap
# Steps charged per queue a message is handed to: an enqueue (and maybe a delivery) costs
# about as much as examining eight trie nodes.
ENQUEUE_STEPS = 8


@dataclass(slots=True)
class Published:
    """What became of one publish."""

    queues: list[Queue] = field(default_factory=list)  # every queue that took the message
    wrote: bool = False  # a durable record was written: replies wait for the group commit
    rejected: bool = False  # a queue refused it (overflow=reject-publish*): nack it

    @property
    def routed(self) -> bool:
        return bool(self.queues)


def publish(
    vhost: VirtualHost,
    exchange: Exchange | None,
    message: Message,
    now_ms: int,
    *,
    message_ids: Callable[[], str] | None = None,
) -> Published:
    """Route ``message`` from ``exchange`` and hand it to every queue it reaches.

    ``exchange`` is None when it was deleted in the meantime (a transaction's commit): the
    message is then unroutable. ``message_ids`` stamps a ``message_id`` on a message that
    has none (docs/contracts/spark.md#schema).
    """
    message = _stamped(message, message_ids)
    if exchange is None:
        return Published()
    exchange.stats_publish_in += 1
    queues = vhost.route(exchange, routing_keys(message), message)
    return enqueue(exchange, message, queues, now_ms)


def publish_within(
    vhost: VirtualHost,
    exchange: Exchange | None,
    message: Message,
    now_ms: int,
    *,
    meter: budgets.Meter,
    message_ids: Callable[[], str] | None = None,
) -> Published | PendingPublish:
    """``publish`` if its routing and enqueueing fit in ``meter``, else the publish waiting
    to be routed, or routed and waiting to be handed to its (many) queues.

    One call per ``basic.publish``: the common case, the default exchange without CC/BCC
    (one key, at most one queue), is charged and enqueued here without the general route;
    it costs the same steps as ``routing.route`` would charge, and parks the same way when
    ``meter`` has less than that left.
    """
    raw = message.raw_properties
    if message_ids is not None and not rewrite.has_message_id(raw):  # _stamped, inlined
        message = message.with_properties(rewrite.with_message_id(raw, message_ids()))
    if exchange is None:
        return Published()
    exchange.stats_publish_in += 1
    if exchange is vhost.default_exchange and not (
        message.has_headers and b"CC" in message.raw_properties
    ):
        queue = vhost.queues.get(message.routing_key)
        left = meter.left - (1 if queue is None else 1 + ENQUEUE_STEPS)  # routing.route's charge
        if left >= 0:
            meter.left = left
            return Published() if queue is None else enqueue(exchange, message, [queue], now_ms)
    keys = routing_keys(message)
    try:
        queues = routing.route(vhost, exchange, keys, message, meter)
        left = meter.left - ENQUEUE_STEPS * len(queues)  # meter.charge, inlined
        if left < 0:
            raise budgets.OverBudgetError
        meter.left = left
    except budgets.OverBudgetError:
        steps = routing.route_steps(vhost, exchange, keys, message)
        return PendingPublish(exchange, message, budgets.Resumable(steps), now_ms)
    return enqueue(exchange, message, queues, now_ms)


class PendingPublish:
    """A publish routed, then handed to its queues, over several event-loop turns."""

    __slots__ = ("_enqueueing", "exchange", "message", "now_ms", "routing")

    def __init__(
        self,
        exchange: Exchange,
        message: Message,
        routing: budgets.Resumable[list[Queue]],
        now_ms: int,
    ) -> None:
        self.exchange = exchange
        self.message = message
        self.routing = routing
        self.now_ms = now_ms  # when it was published: its queues' TTLs count from then
        self._enqueueing: budgets.Resumable[Published] | None = None

    def advance(self, meter: budgets.Meter) -> bool:
        """Route, then enqueue, for at most ``meter``'s steps (plus one chunk); True once
        every queue it reached that still exists has it."""
        enqueueing = self._enqueueing
        if enqueueing is None:
            if not self.routing.advance(meter):
                return False
            steps = _enqueue_steps(self.exchange, self.message, self.routing.result, self.now_ms)
            enqueueing = self._enqueueing = budgets.Resumable(steps)
        return enqueueing.advance(meter)

    def finish(self, now_ms: int) -> Published:
        """What became of it, once ``advance`` returned True."""
        if self._enqueueing is None:
            raise RuntimeError("the publish has not been routed yet")
        return self._enqueueing.result


def _stamped(message: Message, message_ids: Callable[[], str] | None) -> Message:
    if message_ids is not None and not rewrite.has_message_id(message.raw_properties):
        message = message.with_properties(
            rewrite.with_message_id(message.raw_properties, message_ids())
        )
    return message


def enqueue(exchange: Exchange, message: Message, queues: list[Queue], now_ms: int) -> Published:
    """Hand a routed message to every queue it reached."""
    if not queues:
        return Published()
    outcome = Published(queues)  # positional: no list made only to be replaced
    exchange.stats_publish_out += 1
    if message.has_headers and b"BCC" in message.raw_properties and "BCC" in message.headers():
        message = strip_bcc(message)
    raw = message.raw_properties  # "x-death" and "-death-" both contain "-death": one search
    if message.has_headers and b"-death" in raw and (b"x-death" in raw or b"-death-" in raw):
        message.foreign_deaths = True  # header names: without a headers table, no search
    for queue in queues:
        result = queue.publish(message, now_ms)
        if result == PUBLISH_SYNC:
            outcome.wrote = True
        elif result == PUBLISH_REJECTED:
            outcome.rejected = True
        if queue.consumers and queue.ready_count and queue.consumers.cursor >= 0:
            queue.drain(now_ms)  # not when the last scan found every consumer full (consumers.py)
    return outcome


def _enqueue_steps(
    exchange: Exchange, message: Message, queues: list[Queue], now_ms: int
) -> budgets.Steps[Published]:
    """``enqueue`` a few queues at a time, skipping queues deleted meanwhile."""
    outcome = Published()
    if not queues:
        return outcome
    exchange.stats_publish_out += 1
    if message.has_headers and b"BCC" in message.raw_properties and "BCC" in message.headers():
        message = strip_bcc(message)
    raw = message.raw_properties  # "x-death" and "-death-" both contain "-death": one search
    if message.has_headers and b"-death" in raw and (b"x-death" in raw or b"-death-" in raw):
        message.foreign_deaths = True  # header names: without a headers table, no search
    done = 0
    for queue in queues:
        if queue.deleted:
            continue
        outcome.queues.append(queue)
        result = queue.publish(message, now_ms)
        if result == PUBLISH_SYNC:
            outcome.wrote = True
        elif result == PUBLISH_REJECTED:
            outcome.rejected = True
        if queue.consumers and queue.ready_count and queue.consumers.cursor >= 0:
            queue.drain(now_ms)  # not when the last scan found every consumer full (consumers.py)
        done += ENQUEUE_STEPS
        if done >= budgets.CHUNK:
            yield done
            done = 0
    yield done
    return outcome


def routing_keys(message: Message) -> list[str]:
    """The routing key plus CC and BCC header keys (EX-4, sender-selected distribution)."""
    keys = [message.routing_key]
    if not message.has_headers or b"CC" not in message.raw_properties:
        return keys
    headers = message.headers()
    for name in ("CC", "BCC"):
        extra = headers.get(name)
        if isinstance(extra, list):
            keys.extend(_text(key) for key in extra if isinstance(key, str | bytes))
    return keys


def strip_bcc(message: Message) -> Message:
    """BCC never reaches consumers (EX-4); one of the few places a message changes."""
    decoded = properties.decode_properties(message.raw_properties)
    headers = dict(decoded.get("headers") or {})
    headers.pop("BCC", None)
    decoded["headers"] = headers
    return message.with_properties(properties.encode_properties(**decoded))


# The user_id property's presence flag (0x0010 of the 16-bit property flags), in the second byte.
USER_ID_FLAG = 0x10


def check_user_id(raw_properties: bytes, user: str, tags: Iterable[str]) -> None:
    """A publish's ``user_id`` must name the user who publishes, unless they are tagged
    ``impersonator``: RabbitMQ validates it so a consumer can trust it (406 otherwise, with
    RabbitMQ's text). Called only when the flag (``USER_ID_FLAG``) is set."""
    claimed = properties.decode_properties(raw_properties).get("user_id")
    if claimed is None or claimed == user or "impersonator" in tags:
        return
    raise errors.precondition_failed(
        f"user_id property set to '{claimed}' but authenticated user was '{user}'"
    )


def check_expiration(raw_properties: bytes) -> None:
    """TTL-2: a malformed per-message TTL is refused (406 over AMQP, 400 over HTTP).

    Parsed as Erlang's ``string:to_integer``, as RabbitMQ does: an optional sign, digits,
    and the leftover checked before the range ("-1x" is a leftover, "+5" and "-0" are fine).
    An AMQP publish calls it only when its ``Message.expires``, the flag read once, is set.
    """
    value = properties.expiration(raw_properties)
    if value is None:
        return
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
    if number > MAX_EXPIRATION_MS:
        raise errors.precondition_failed(
            f"invalid expiration '{value}': {{value_too_large,{number}}}"
        )
