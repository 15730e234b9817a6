"""Queue handlers: declare, delete (deleteIfEmpty/Unused), sweep with live stats.

A limit change on an existing queue is a 400 "inequivalent arg" for PUT /api/queues; then the
queue's listing tells whether only limits differ, which Hutch brokers change in place
(PUT …/arguments) and other brokers cannot (``ArgumentsImmutable``, pointing to Policy).
Only a queue this object declared itself (``owned``) is changed in place: lowering the limit
of an application's queue of the same name would drop its messages, so that stays a refusal.
"""

from __future__ import annotations

import contextvars
from typing import Any

from hutch_operator.core import brokerclient, errors, references
from hutch_operator.models import kinds, queues
from hutch_operator.topology import reconciling, snapshots, translators
from hutch_operator.topology.handlers import registration

Spec = queues.QueueSpec

# Whether this handler's declare created the queue (the broker answered 201). Set by every
# declare, read by ``stats`` right after it in the same handler task.
_created: contextvars.ContextVar[bool] = contextvars.ContextVar("hutch_queue_created")


async def declare(target: references.Target, spec: Spec, name: str, owned: bool) -> bool:
    hutch = await target.client.is_hutch()
    _created.set(False)
    try:
        answer = await target.client.call(translators.queue_declare(spec, name, hutch=hutch))
        _created.set(answer is brokerclient.CREATED)
    except errors.BrokerRejectedError as exc:
        if "inequivalent" not in str(exc) or not owned:
            raise  # a queue this object did not declare is not changed in place (messages)
        return await _change_limits(target, spec, name, hutch=hutch, refusal=exc)
    return True


async def _change_limits(
    target: references.Target, spec: Spec, name: str, *, hutch: bool, refusal: Exception
) -> bool:
    path = translators.queue_path(spec.vhost, name)
    listed = await target.client.call(brokerclient.Request("GET", path))
    fixed, limits = translators.queue_differences(spec, listed, hutch=hutch)
    if fixed or not limits:
        raise refusal
    if not hutch:
        raise errors.ArgumentsImmutableError(
            f"queue {name} exists with other limits ({', '.join(limits)}); this broker cannot "
            "change queue arguments in place: use a Policy or OperatorPolicy for limits that "
            "change, or delete and re-create the queue"
        )
    try:
        await target.client.call(translators.queue_update_limits(spec, name))
    except (errors.ObjectNotFoundError, errors.BrokerRejectedError) as exc:
        raise errors.ArgumentsImmutableError(
            f"broker refused the in-place argument update for queue {name}: {exc}; "
            "use a Policy or OperatorPolicy instead"
        ) from exc
    return True


async def delete(target: references.Target, spec: Spec, name: str) -> tuple[str, str] | None:
    path = translators.queue_path(spec.vhost, name)
    if spec.delete_if_empty or spec.delete_if_unused:
        try:
            listed = await target.client.call(
                brokerclient.Request("GET", path + "?columns=messages,consumers")
            )
        except errors.ObjectNotFoundError:
            return None
        if isinstance(listed, list):  # RabbitMQ 3.10 answers ?columns= on an item with a list
            listed = listed[0] if listed else {}
        kept = _keep_reason(spec, name, listed)
        if kept is not None:
            return kept
    request = translators.queue_delete(
        spec.vhost, name, if_empty=spec.delete_if_empty, if_unused=spec.delete_if_unused
    )
    try:
        await target.client.call(request)
    except errors.ObjectNotFoundError:
        return None
    except errors.BrokerRejectedError as exc:  # it filled up or got a consumer meanwhile
        return "DeleteSkippedNotEmpty", f"queue {name} kept in broker: {exc}"
    return None


def _keep_reason(spec: Spec, name: str, listed: dict[str, Any]) -> tuple[str, str] | None:
    messages, consumers = int(listed.get("messages") or 0), int(listed.get("consumers") or 0)
    if spec.delete_if_empty and messages:
        return "DeleteSkippedNotEmpty", f"{messages} messages left in broker (queue {name} kept)"
    if spec.delete_if_unused and consumers:
        return "DeleteSkippedNotEmpty", f"{consumers} consumers on queue {name} (queue kept)"
    return None


async def observe(target: references.Target, spec: Spec, name: str) -> reconciling.Observation:
    listing = await snapshots.get(
        target.client, target.key, "queue", translators.queue_list(spec.vhost)
    )
    listed = listing.first(name=name)
    if listed is None:
        return reconciling.Observation(missing=True)
    hutch = await target.client.is_hutch()
    fixed, limits = translators.queue_differences(spec, listed, hutch=hutch)
    if limits and not hutch:
        fixed = [*fixed, *limits]
    return reconciling.Observation(
        changed=limits if hutch else [], mismatched=fixed, stats=translators.queue_stats(listed)
    )


async def stats(target: references.Target, spec: Spec, name: str) -> dict[str, Any]:
    """Live stats right after a declare. A queue the declare created has none to read: its
    counts are zero, and no GET is made (at 10,000 Queues that GET was half the broker requests
    of a create). Its policy fields are left to the sweep's first pass, which writes them only
    if a policy applies (``translators.queue_stats``)."""
    if _created.get(False):
        stream = spec.type == "stream" and await target.client.is_hutch()
        return translators.fresh_queue_stats(hutch_stream=stream)
    listed = await target.client.call(
        brokerclient.Request("GET", translators.queue_path(spec.vhost, name))
    )
    return translators.queue_stats(listed if isinstance(listed, dict) else {})


OPS = reconciling.KindOps(
    kind=kinds.QUEUE,
    identity=lambda spec, name: ("queue", name),
    declare=declare,
    delete=delete,
    observe=observe,
    label="queue",
    stats=stats,
)
registration.register(OPS)
