"""The rules a queue declare checks, apart from the vhost that applies them: pure functions.

A declare either meets an existing queue, which must be equivalent (same owner, flags and
compared arguments, judged by the rules of the way it was declared: Q-2), or makes a new one,
whose name, arguments and properties must be valid (Q-3, and what quorum queues and streams
allow). Both take plain values and change nothing, so RabbitMQ's refusal texts and their
order are decided here, and ``VirtualHost.declare_queue`` reads as its steps: type, check,
create and persist, place under policies. What needs the vhost's state (its queue count
against max-queues, its policies) stays in the vhost.
"""

from __future__ import annotations

from typing import Any

from hutch_broker.model import arguments as args_mod
from hutch_broker.model import quorum, streamargs
from hutch_broker.model.queues import Queue
from hutch_broker.protocol import errors


def typed_arguments(
    default_queue_type: str,
    arguments: dict[str, Any],
    existing: Queue | None,
    *,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    generated: bool,
) -> dict[str, Any]:
    """A declare's arguments with the vhost's default queue type where the client named none.

    RabbitMQ 4.x: a new queue gets the default type when its properties suit it (quorum
    and stream alike: durable, shared, not auto-delete; here also client-named, as both
    types refuse a server-named queue), otherwise stays classic. A redeclare without a type
    is of the type the queue has, so changing the default never makes an existing
    application's declare inequivalent.
    """
    if "x-queue-type" in arguments or default_queue_type in ("classic", "undefined"):
        return arguments
    if existing is not None:
        kept = existing.arguments.get("x-queue-type")
        return arguments if kept is None else {**arguments, "x-queue-type": kept}
    suits = durable and not exclusive and not auto_delete and not generated
    if default_queue_type in (quorum.QUEUE_TYPE, streamargs.QUEUE_TYPE) and suits:
        return {**arguments, "x-queue-type": default_queue_type}
    return arguments


def check_exclusive(vhost: str, queue: Queue, owner: object | None) -> None:
    """An exclusive queue is its owner's alone (405 RESOURCE_LOCKED for anyone else)."""
    if queue.exclusive_owner is not None and queue.exclusive_owner is not owner:
        raise errors.resource_locked(
            f"cannot obtain exclusive access to locked queue '{queue.name}' in vhost "
            f"'{vhost}'. It could be originally declared on another connection or "
            "the exclusive property value does not match that of the original declaration."
        )


def check_equivalent(
    vhost: str,
    existing: Queue,
    *,
    exclusive_owner: object | None,
    durable: bool,
    auto_delete: bool,
    arguments: dict[str, Any],
) -> None:
    """A redeclare must match the queue it meets (Q-2), in RabbitMQ's order: the owner,
    ``durable``, ``auto_delete``, then the compared arguments by the rules of the way the
    queue was declared (the management API accepts spellings AMQP refuses)."""
    name = existing.name
    check_exclusive(vhost, existing, exclusive_owner)
    args_mod.check_flag("durable", "queue", name, vhost, durable, existing.durable)
    args_mod.check_flag("auto_delete", "queue", name, vhost, auto_delete, existing.auto_delete)
    args_mod.check_queue_equivalence(
        name, vhost, existing.arguments, arguments, current_source=existing.declared_via
    )


def check_new(
    vhost: str,
    name: str,
    arguments: dict[str, Any],
    *,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    generated: bool,
) -> bool:
    """A new queue's name, arguments (Q-3) and, for a quorum queue or a stream, properties;
    returns whether it is a stream (the class to make). Raises RabbitMQ's error, first
    failure first; a server-generated ``amq.gen-`` name is the broker's own, not reserved."""
    if name.startswith("amq.") and not generated:
        raise errors.access_refused(f"queue name '{name}' contains reserved prefix 'amq.*'")
    args_mod.validate_queue_arguments(name, vhost, arguments)
    stream = streamargs.is_stream(arguments)
    if stream or quorum.is_quorum(arguments):
        args_mod.check_replicated_properties(
            streamargs.TYPE_MODULE if stream else quorum.TYPE_MODULE,
            name,
            vhost,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            generated=generated,
        )
    return stream
