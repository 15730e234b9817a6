"""The periodic drift sweep and Queue live stats (design §5.5).

Each object's timer compares its own desired state with a shared, cached listing of its broker
(``snapshots``), so a period costs one list call per (broker, kind, vhost), not one per object.
Missing objects are re-declared and mutable differences re-applied (``DriftCorrected``);
immutable differences are reported (Ready=False ``BrokerMismatch`` and one Warning of that
reason) and never fixed by deleting. Objects whose last reconcile failed are simply reconciled
again, which is how permanent errors (``BrokerRejected``, ``NamespaceNotAllowed``) get retried.
"""

from __future__ import annotations

import random
from typing import Any

import kopf

from hutch_operator import conditions, config, errors, metrics, reconciling, references


def initial_delay(**_: Any) -> float:
    """Spread the timers over one period so a restart does not tick them all at once."""
    return random.uniform(0, config.sync_period())


async def tick(ctx: reconciling.Context, *, retry: int) -> None:
    try:
        model = reconciling.parse(ctx.ops, ctx.body.spec)
        name = reconciling.object_name(model, ctx)
    except errors.SpecError:
        return
    try:
        target = await references.resolve(model, ctx.namespace, ctx.brokers)
        reconciling.record_endpoint(ctx, target)
        if reconciling.check_conflict(ctx, target, model, name):
            return
    except errors.HutchError as error:
        reconciling.fail(ctx, error, retry, raise_=False)
        return
    settled = ctx.status.get("observedGeneration") == ctx.generation
    if not settled:
        # Kopf's create/update/resume handler has not finished a first attempt for this
        # generation (every attempt, failed or not, records observedGeneration). It owns the
        # object until then; a tick now would be a second write beside it (seen on the node: a
        # timer's body that predates the handler's status patch re-declared the object).
        return
    ready = conditions.find(ctx.status.get("conditions"), reconciling.READY) or {}
    # A mismatch is observed again, not re-declared: a declare would only be refused
    # (inequivalent) and turn the one BrokerMismatch Warning into a second, BrokerRejected.
    mismatch = settled and ready.get("reason") == errors.BrokerMismatchError.reason
    if ready.get("status") != "True" and not mismatch:
        await _redeclare(ctx, target, model, name, retry)
        return
    try:
        observation = await ctx.ops.observe(target, model, name)
        if observation.mismatched:
            # One Warning (BrokerMismatch, posted by ``fail`` when Ready changes), not a
            # DriftDetected on every tick beside it for the same problem.
            fields = ", ".join(observation.mismatched)
            message = f"{ctx.ops.label} {name} differs in the broker: {fields} (immutable)"
            raise errors.BrokerMismatchError(message)
        if observation.missing or observation.changed:
            await reconciling.declare_into(ctx, target, model, name)
            metrics.DRIFT_CORRECTIONS.labels(ctx.ops.kind.kind).inc()
            what = (
                "missing; re-declared"
                if observation.missing
                else (", ".join(observation.changed) + " re-applied")
            )
            kopf.warn(ctx.body, reason="DriftCorrected", message=f"{ctx.ops.label} {name} {what}")
    except errors.HutchError as error:
        reconciling.fail(ctx, error, retry, raise_=False)
        return
    if mismatch:  # the broker object was put right (by hand): Ready again
        reconciling.declared(ctx, target, name, observation.missing or bool(observation.changed))
    if observation.stats is not None and config.queue_stats():
        _write_stats(ctx, observation.stats)


async def _redeclare(
    ctx: reconciling.Context, target: references.Target, model: Any, name: str, retry: int
) -> None:
    try:
        wrote = await reconciling.declare_into(ctx, target, model, name)
    except errors.HutchError as error:
        reconciling.fail(ctx, error, retry, raise_=False)
        return
    reconciling.declared(ctx, target, name, wrote)


def _write_stats(ctx: reconciling.Context, stats: dict[str, Any]) -> None:
    """At most one status patch per object per period, and none when nothing moved."""
    if not conditions.status_patch(ctx.status, stats):
        return
    reconciling.write_status(ctx, {**stats, "statsUpdatedAt": conditions.now()})
