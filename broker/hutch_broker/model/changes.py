"""What changed in the durable definitions, said in the export format, so it can be journaled.

The model reports every change to a durable definition as one ``Change``: the section of the
``GET /api/definitions`` document it belongs to and the item exactly as that document holds it
(for a deletion, the item as it was). Persistence appends that item to a journal and recovery
rebuilds the document from it, so the item builders here are shared with
``Broker.export_definitions``: the on-disk snapshot, the journal and the HTTP export can only
agree. A hook called without a change means "something changed, I cannot say what": the server
then writes a whole snapshot, which is always correct, only O(size of the definitions).

What is reported mirrors what the durable export holds: never a transient exchange or queue, an
exclusive queue, or a binding that touches one of them.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hutch_broker.model import access

if TYPE_CHECKING:
    from hutch_broker.model.exchanges import Binding, Exchange
    from hutch_broker.model.policies import Policy
    from hutch_broker.model.queues import Queue


@dataclass(frozen=True, slots=True)
class Change:
    section: str  # "vhosts", "users", "permissions", "policies", "parameters", "queues", ...
    item: dict[str, Any]  # as in that section of the export; JSON-ready
    deleted: bool = False


class ChangeListener(Protocol):
    def __call__(self, change: Change | None = None, /) -> None: ...


class VhostFields(Protocol):
    """What the export holds of a ``VirtualHost``; a protocol, as the vhost reports its
    changes through this module (the model's modules import without cycles)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def tags(self) -> Sequence[str]: ...

    @property
    def default_queue_type(self) -> str: ...

    @property
    def limits(self) -> Mapping[str, int]: ...


def ignore(change: Change | None = None, /) -> None:
    """The listener of a model nobody persists (tests, before the server wires itself)."""


def json_safe(value: Any) -> Any:
    """Field-table values (bytes, decimals, timestamps) as JSON values."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


# -- what the durable export keeps --------------------------------------------------------


# One rule for both exports: ``durable_only`` is the on-disk copy (and the journal), without it
# the ``GET /api/definitions`` export, which also lists transient objects.


def queue_exported(queue: Queue, *, durable_only: bool) -> bool:
    return queue.exclusive_owner is None and (queue.durable or not durable_only)


def exchange_exported(exchange: Exchange, *, durable_only: bool) -> bool:
    builtin = exchange.name == "" or exchange.name.startswith("amq.")
    return not builtin and (exchange.durable or not durable_only)


def binding_exported(binding: Binding, *, durable_only: bool) -> bool:
    exclusive = getattr(binding.destination, "exclusive_owner", None) is not None
    return not exclusive and (binding.durable or not durable_only)


def queue_persisted(queue: Queue) -> bool:
    return queue_exported(queue, durable_only=True)


def exchange_persisted(exchange: Exchange) -> bool:
    return exchange_exported(exchange, durable_only=True)


def binding_persisted(binding: Binding) -> bool:
    return binding_exported(binding, durable_only=True)


# -- items, one builder per section --------------------------------------------------------


def vhost_item(vhost: VhostFields) -> dict[str, Any]:
    item: dict[str, Any] = {"name": vhost.name}
    if vhost.description or vhost.tags:
        item["description"] = vhost.description
        item["tags"] = list(vhost.tags)
    if vhost.default_queue_type != "classic":
        item["default_queue_type"] = vhost.default_queue_type
    return item


def user_item(user: access.User) -> dict[str, Any]:
    return {
        "name": user.name,
        "password_hash": user.password_hash,
        "hashing_algorithm": access.HASHING_ALGORITHM,
        "tags": list(user.tags),
        "limits": dict(user.limits),
    }


def vhost_limits_item(vhost: VhostFields) -> dict[str, Any]:
    """Vhost limits travel as the vhost's runtime parameter ``vhost-limits``/``limits``."""
    return {
        "value": dict(vhost.limits),
        "vhost": vhost.name,
        "component": "vhost-limits",
        "name": "limits",
    }


def permission_item(vhost: str, user: str, permission: access.Permission) -> dict[str, Any]:
    return {
        "user": user,
        "vhost": vhost,
        "configure": permission.configure,
        "write": permission.write,
        "read": permission.read,
    }


def topic_permission_item(
    vhost: str, user: str, permission: access.TopicPermission
) -> dict[str, Any]:
    return {
        "user": user,
        "vhost": vhost,
        "exchange": permission.exchange,
        "write": permission.write,
        "read": permission.read,
    }


def policy_change(vhost: str, policy: Policy, *, operator: bool, deleted: bool = False) -> Change:
    """User policies have their own section; operator policies are runtime parameters."""
    if not operator:
        return Change("policies", policy.as_json(), deleted)
    return Change("parameters", operator_policy_item(vhost, policy), deleted)


def operator_policy_item(vhost: str, policy: Policy) -> dict[str, Any]:
    return {
        "value": {
            "pattern": policy.pattern,
            "definition": policy.definition,
            "priority": policy.priority,
            "apply-to": policy.apply_to,
        },
        "vhost": vhost,
        "component": "operator_policy",
        "name": policy.name,
    }


def queue_item(vhost: str, queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "vhost": vhost,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "arguments": json_safe(queue.arguments),
    }


def exchange_item(vhost: str, exchange: Exchange) -> dict[str, Any]:
    return {
        "name": exchange.name,
        "vhost": vhost,
        "type": exchange.kind,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": json_safe(exchange.arguments),
    }


def binding_item(vhost: str, binding: Binding) -> dict[str, Any]:
    return {
        "source": binding.source.name,
        "vhost": vhost,
        "destination": binding.destination.name,
        "destination_type": binding.destination_type,
        "routing_key": binding.routing_key,
        "arguments": json_safe(binding.arguments),
    }
