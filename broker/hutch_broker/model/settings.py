"""A queue's effective settings: arguments merged with policies (POL-5, POL-6).

Kept pure and separate from ``queues`` so the merge rules are one table that
is easy to test and so a policy change is just "recompute and apply".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from hutch_broker.protocol.strings import text

# Keys where the conservative (lesser) value wins when two sources set them.
LESSER_WINS: Final = (
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "delivery-limit",
    "ring-size",
)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    message_ttl: int | None = None
    expires: int | None = None
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    ring_size: int | None = None
    delivery_limit: int | None = None  # quorum queues only (model/quorum.py)


def _text(value: Any) -> str | None:
    """A string argument as text; None for any other type (the caller reports it)."""
    return text(value) if isinstance(value, str | bytes) else None


def _number(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _min(*values: int | None) -> int | None:
    present = [value for value in values if value is not None]
    return min(present) if present else None


def _delivery_limit(argument: int | None, policy: int | None) -> int | None:
    """The lesser wins, except a negative one (no limit, 4.x): then the greater wins, so a
    limit set on either side holds (RabbitMQ 4.x ``resolve_delivery_limit``)."""
    if argument is not None and policy is not None and min(argument, policy) < 0:
        return max(argument, policy)
    return _min(argument, policy)


def merge_policies(
    policy: dict[str, Any] | None, operator_policy: dict[str, Any] | None
) -> dict[str, Any]:
    """POL-5: one user policy and one operator policy become one definition."""
    merged = dict(policy or {})
    for key, value in (operator_policy or {}).items():
        if key not in merged:
            merged[key] = value
        elif key in LESSER_WINS:
            merged[key] = min(merged[key], value)
        else:
            merged[key] = value
    return merged


def effective(
    arguments: dict[str, Any],
    policy: dict[str, Any] | None,
    operator_policy: dict[str, Any] | None,
) -> QueueSettings:
    """POL-6: arguments and the merged policy give the settings the queue enforces."""
    merged = merge_policies(policy, operator_policy)
    operator = operator_policy or {}
    user = policy or {}
    ring_size = _number(arguments.get("x-ring-size"))
    if ring_size is None:
        ring_size = _number(user.get("ring-size"))
    ring_size = _min(ring_size, _number(operator.get("ring-size")))
    dlx = _text(arguments.get("x-dead-letter-exchange"))
    if dlx is None:
        dlx = _text(user.get("dead-letter-exchange"))
    dlrk = _text(arguments.get("x-dead-letter-routing-key"))
    if dlrk is None:
        dlrk = _text(user.get("dead-letter-routing-key"))
    overflow = _text(arguments.get("x-overflow")) or _text(user.get("overflow")) or "drop-head"
    return QueueSettings(
        max_length=_min(_number(arguments.get("x-max-length")), _number(merged.get("max-length"))),
        max_length_bytes=_min(
            _number(arguments.get("x-max-length-bytes")), _number(merged.get("max-length-bytes"))
        ),
        overflow=overflow,
        message_ttl=_min(
            _number(arguments.get("x-message-ttl")), _number(merged.get("message-ttl"))
        ),
        expires=_min(_number(arguments.get("x-expires")), _number(merged.get("expires"))),
        dead_letter_exchange=dlx,
        dead_letter_routing_key=dlrk,
        ring_size=ring_size,
        delivery_limit=_delivery_limit(
            _number(arguments.get("x-delivery-limit")), _number(merged.get("delivery-limit"))
        ),
    )
