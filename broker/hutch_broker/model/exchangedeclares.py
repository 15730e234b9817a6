"""The rules an exchange declare checks, apart from the vhost that applies them: pure functions.

As for queues (``queuedeclares``): a declare meets an existing exchange, which must be
equivalent (EX-3: type, flags, alternate exchange, in RabbitMQ's order), or makes a new one,
whose name and alternate exchange must be valid. Both take plain values and change nothing,
so ``VirtualHost.declare_exchange`` reads as check, create and persist, place under policies.
"""

from __future__ import annotations

from typing import Any

from hutch_broker.model import arguments as args_mod
from hutch_broker.model.exchanges import Exchange
from hutch_broker.protocol import errors


def check_equivalent(
    vhost: str,
    existing: Exchange,
    *,
    exchange_type: str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: dict[str, Any],
) -> None:
    """A redeclare must match: type, ``durable``, ``auto_delete``, ``internal``, then the
    alternate exchange (the one argument RabbitMQ 3.10.8 compares for exchanges)."""
    name = existing.name
    if existing.kind != exchange_type:
        raise args_mod.inequivalent(
            "type", "exchange", name, vhost, exchange_type, existing.kind, "amqp"
        )
    args_mod.check_flag("durable", "exchange", name, vhost, durable, existing.durable)
    args_mod.check_flag("auto_delete", "exchange", name, vhost, auto_delete, existing.auto_delete)
    args_mod.check_flag("internal", "exchange", name, vhost, internal, existing.internal)
    old = existing.arguments.get("alternate-exchange")
    new = arguments.get("alternate-exchange")
    if (old is None) != (new is None) or (
        old is not None and args_mod.format_value(old) != args_mod.format_value(new)
    ):
        raise args_mod.inequivalent("alternate-exchange", "exchange", name, vhost, new, old, "amqp")


def check_new(vhost: str, name: str, arguments: dict[str, Any]) -> None:
    """A new exchange's name (``amq.`` is the broker's) and its alternate exchange's type."""
    if name.startswith("amq."):
        raise errors.access_refused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
    alternate = arguments.get("alternate-exchange")
    args_mod.check_exchange_name_type("exchange", name, vhost, "alternate-exchange", alternate)
