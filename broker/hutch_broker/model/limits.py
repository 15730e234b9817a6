"""Vhost and user limits: RabbitMQ's max-connections, max-queues and max-channels.

Why: a tenant sharing a broker must not be able to take all of it. RabbitMQ lets an administrator
cap a vhost's connections and queues (``/api/vhost-limits``) and a user's connections and
channels (``/api/user-limits``), and clients and tools (rabbitmqadmin, the topology operator)
set them. Pure: validation with RabbitMQ 3.10.8's texts, and the one comparison every check
uses. A negative value means no limit, 0 allows nothing, as in RabbitMQ; values are kept as
given so a GET shows what was put.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from hutch_broker.model.policies import erlang_term

VHOST: Final = ("max-connections", "max-queues")
USER: Final = ("max-connections", "max-channels")
VHOST_COMPONENT: Final = "vhost-limits"  # how vhost limits travel in definitions' parameters
VHOST_PARAMETER: Final = "limits"

Kind = Literal["vhost", "user"]


class LimitError(ValueError):
    """A limit RabbitMQ would refuse; ``str()`` is its 400 reason."""


def validate(kind: Kind, name: str, value: Any) -> int:
    """The value to store for limit ``name``, or LimitError with RabbitMQ's reason."""
    known = VHOST if kind == "vhost" else USER
    if name not in known:
        term = f"[{{{erlang_term(name)},{erlang_term(value)}}}]"
        where = "limits" if kind == "vhost" else "user-limits"
        raise LimitError(_vhost_text(kind, f"Unrecognised terms {term} in {where}"))
    if isinstance(value, bool) or not isinstance(value, int):
        raise LimitError(
            _vhost_text(kind, f"{name} should be a number, actually was {erlang_term(value)}")
        )
    return value


def validate_all(kind: Kind, limits: Any) -> dict[str, int]:
    """A whole ``{"max-...": n}`` object (definitions import)."""
    if not isinstance(limits, dict):
        raise LimitError(f"{kind} limits must be a JSON object, not {erlang_term(limits)}")
    return {str(name): validate(kind, str(name), value) for name, value in limits.items()}


def reached(limits: Mapping[str, int], name: str, current: int) -> int | None:
    """The limit ``name`` if ``current`` users of it leave no room for one more, else None."""
    limit = limits.get(name)
    if limit is None or limit < 0 or current < limit:
        return None
    return limit


def _vhost_text(kind: Kind, detail: str) -> str:
    """RabbitMQ wraps vhost-limit (runtime parameter) errors; user-limit errors are bare."""
    return f"Validation failed\n\n{detail}\n" if kind == "vhost" else detail
