"""Quorum-type queues on one replica: the rules that need no replication.

Why: RabbitMQ 4.x users, and Queue CRs written for the RabbitMQ topology operator, declare
``x-queue-type: quorum``. On one replica a quorum queue is a classic queue with stricter rules,
so the queue model keeps one class and asks this module what differs (all observed on RabbitMQ
3.10.8, which runs quorum queues on a single node):

- it is always durable: auto-delete, exclusive and non-durable declares are refused, in that
  order, and so is a server-named one; every message is stored, whatever its delivery mode;
- the arguments of other queue types are refused (``REFUSED_ARGUMENTS``), and its own are checked;
- ``reject-publish`` refuses a publish once the queue is over its limit, so it fills to one
  message (or one body) past it; ``reject-publish-dlx`` acts as ``drop-head``;
- a message returned to the queue (reject or nack with requeue, its channel closed) counts one
  more delivery attempt and goes to the back of the queue; deliveries carry the count in the
  ``x-delivery-count`` header (basic.get from the first, with 0; a consumer's first delivery
  has none); a return past ``x-delivery-limit`` (or the
  ``delivery-limit`` policy, the lesser wins; 20 when neither is set and none when negative,
  as in RabbitMQ 4.x) dead-letters it with reason ``delivery_limit``,
  without that header. A stored message is re-written with its count on each return, under a
  header of its own that no publish can carry in (``STORED_COUNT``), so the count survives a
  restart and a publisher's ``x-delivery-count`` never counts as attempts.

Replication, leader election and the Raft log come with multi-replica Brokers, not here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from hutch_broker.model import settings as settings_mod
from hutch_broker.model.messages import Message
from hutch_broker.protocol import errors, rewrite
from hutch_broker.protocol.strings import text

QUEUE_TYPE: Final = "quorum"
TYPE_MODULE: Final = "rabbit_quorum_queue"  # how RabbitMQ names the type in its error texts
DELIVERY_COUNT: Final = "x-delivery-count"
# The count as the store keeps it: only in records re-written on a return, stripped from every
# publish (a publisher cannot forge it) and from a recovered message (never delivered). The
# public x-delivery-count cannot serve: a publisher may set it, and 3.10.8 delivers a first
# delivery with the publisher's headers untouched.
STORED_COUNT: Final = "x-hutch-stored-delivery-count"
DELIVERY_LIMIT_REASON: Final = "delivery_limit"
DEFAULT_DELIVERY_LIMIT: Final = (
    20  # RabbitMQ 4.0+; 3.10.8 has no default (docs/broker-differences.md)
)
# Declare arguments RabbitMQ knows but gives to other queue types (3.10.8, observed).
REFUSED_ARGUMENTS: Final = (
    "x-max-priority",
    "x-queue-mode",
    "x-queue-version",
    "x-queue-master-locator",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
)
DEAD_LETTER_STRATEGIES: Final = ("at-most-once", "at-least-once")
_POSITIVE: Final = ("x-quorum-initial-group-size",)
_NON_NEGATIVE: Final = ("x-max-in-memory-length", "x-max-in-memory-bytes")


def is_quorum(arguments: dict[str, Any]) -> bool:
    value = arguments.get("x-queue-type")
    return isinstance(value, str | bytes) and text(value) == QUEUE_TYPE


def _invalid(arg: str, queue: str, vhost: str, detail: str) -> errors.AMQPError:
    return errors.precondition_failed(
        f"invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {detail}"
    )


def check_arguments(queue: str, vhost: str, arguments: dict[str, Any]) -> None:
    """The quorum-only argument checks, after the common ones (``arguments``): the values of
    its own arguments, then the first argument of another type in the client's order (3.10.8
    checks values first: ``x-max-priority`` 300 is refused as another type's, not as too big)."""
    for arg in (*_POSITIVE, *_NON_NEGATIVE):
        value = arguments.get(arg)
        if isinstance(value, int) and not isinstance(value, bool):
            if arg in _POSITIVE and value < 1:
                kind = "value_zero" if value == 0 else "value_negative"
                raise _invalid(arg, queue, vhost, f"{{{kind},{value}}}")
            if value < 0:
                raise _invalid(arg, queue, vhost, f"{{value_negative,{value}}}")
    strategy = arguments.get("x-dead-letter-strategy")
    if strategy is not None and (
        not isinstance(strategy, str | bytes) or text(strategy) not in DEAD_LETTER_STRATEGIES
    ):
        raise _invalid("x-dead-letter-strategy", queue, vhost, "invalid_dlx_strategy")
    foreign = next((arg for arg in arguments if arg in REFUSED_ARGUMENTS), None)
    if foreign is not None:
        raise errors.precondition_failed(
            f"invalid arg '{foreign}' for queue '{queue}' in vhost '{vhost}' "
            f"of queue type {TYPE_MODULE}"
        )


def settings(queue_settings: settings_mod.QueueSettings) -> settings_mod.QueueSettings:
    """``reject-publish-dlx`` is a classic-queue mode: a quorum queue drops the head instead;
    without a delivery limit, 4.x's default of 20 applies."""
    if queue_settings.overflow == "reject-publish-dlx":
        queue_settings = dataclasses.replace(queue_settings, overflow="drop-head")
    if queue_settings.delivery_limit is None:
        queue_settings = dataclasses.replace(queue_settings, delivery_limit=DEFAULT_DELIVERY_LIMIT)
    return queue_settings


def check_consume(queue: str, vhost: str, *, global_prefetch: int) -> None:
    """A channel-wide prefetch (basic.qos global) cannot be kept per queue: 540, as 3.10.8."""
    if global_prefetch:
        raise errors.not_implemented(
            f"queue '{queue}' in vhost '{vhost}' does not support global qos"
        )


def exceeds_limit(delivery_count: int, limit: int | None) -> bool:
    """True when a message returned ``delivery_count`` times must be dead-lettered.

    A negative limit means none (RabbitMQ 4.x; 3.10.8 dead-letters at the first return)."""
    return limit is not None and limit >= 0 and delivery_count > limit


def with_delivery_count(message: Message, count: int) -> Message:
    """The message as delivered: ``x-delivery-count`` set, other headers byte for byte."""
    raw = rewrite.edit_headers(
        message.raw_properties, set_values={DELIVERY_COUNT: rewrite.encode_value(count)}
    )
    return message.with_properties(raw)


def stored_form(message: Message, count: int) -> Message:
    """The record written on a return: the message as delivered, plus the stored count."""
    raw = rewrite.edit_headers(
        message.raw_properties, set_values={STORED_COUNT: rewrite.encode_value(count)}
    )
    return message.with_properties(raw)


def restored(message: Message) -> tuple[Message, int]:
    """A recovered record: the message without the stored count, and that count (0 if none)."""
    tagged = rewrite.header_value(message.raw_properties, STORED_COUNT)
    if tagged is None:
        return message, 0
    value = rewrite.decode_value(tagged)
    count = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
    return inbound(message), count


def inbound(message: Message) -> Message:
    """A publish into a quorum queue: a stored-count header it carries is dropped."""
    if rewrite.header_value(message.raw_properties, STORED_COUNT) is None:
        return message
    return message.with_properties(
        rewrite.edit_headers(message.raw_properties, remove=(STORED_COUNT,))
    )


def without_delivery_count(message: Message) -> Message:
    """The message as it leaves the queue for a dead-letter exchange: no delivery count."""
    if rewrite.header_value(message.raw_properties, DELIVERY_COUNT) is None:
        return message
    return message.with_properties(
        rewrite.edit_headers(message.raw_properties, remove=(DELIVERY_COUNT,))
    )
