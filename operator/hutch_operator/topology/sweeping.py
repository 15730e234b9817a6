"""The periodic drift sweep and Queue live stats: one sweep per (broker, kind).

Contract: docs/contracts/operator.md#sweep.

Why not a Kopf timer per object (as before): Kopf runs every timer as a task of its own, so
10,000 Queues were 10,000 tasks waking each period, each going through Kopf's handler machinery;
the operator needed 523 MB, took 380 s to make 10,000 Queues Ready and did not settle a restart
in 8 minutes. Here one task (``Sweeper``) walks a Kopf index of desired objects (``desired``,
kept from the watch Kopf has anyway) grouped by the broker they name (a Broker, or a connection
Secret), and judges each group against one listing of that broker per kind and vhost
(``snapshots``), so a period with nothing changed costs O(brokers x kinds x vhosts) list calls
and no Kubernetes call at all, whatever the number of objects.

What a pass does to each object is what the per-object tick did (``tick``): missing objects are
re-declared and mutable differences re-applied (``DriftCorrected``); immutable differences are
reported (Ready=False ``BrokerMismatch`` and one Warning of that reason) and never fixed by
deleting; objects whose last reconcile failed are reconciled again, which is how permanent
errors (``BrokerRejected``, ``NamespaceNotAllowed``) get retried; Queue live stats are written
when they changed. Status is written only when something changed, with the object's
``resourceVersion`` as a precondition, so a pass judging from an index entry older than a
handler's write loses (409) instead of overwriting it.

Spreading and yielding: each group is swept once per period from its own random point in it,
and a pass yields to the event loop every ``SLICE`` objects, so create/update/delete handlers
(Kopf's own per-object workers) never queue behind a sweep; an object whose handler is running,
or whose index entry predates its handler's last run, is left to the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from kopf._core.engines import posting as kopf_posting

from hutch_operator.core import conditions, config, errors, kube, metrics, references
from hutch_operator.models import common
from hutch_operator.topology import reconciling, snapshots, translators

logger = logging.getLogger(__name__)

SLICE = 16  # objects judged between two yields to the event loop (about 3 ms on a busy 2-core)
STATUS_SKIPPED = frozenset({"kopf"})  # status keys the sweep never reads (Kopf's bookkeeping)
INTERNED_LENGTH = 24  # strings up to this long repeat across objects (reasons, types, vhosts)
METADATA = ("name", "namespace", "uid", "generation", "creationTimestamp", "resourceVersion")


_posting: list[Any] = []  # [loop, queue]: Kopf's event poster, as its handlers see it


def remember_posting() -> None:
    """Called from an index function, inside Kopf's per-object context: keeps where Kopf's
    ``kopf.info``/``kopf.warn`` queue their Events, which Kopf sets for its own tasks only, so
    the sweep task can post the same Events the per-object timers did."""
    with contextlib.suppress(LookupError):
        _posting[:] = [kopf_posting.event_queue_loop_var.get(), kopf_posting.event_queue_var.get()]


def _adopt_posting() -> None:
    if _posting:
        kopf_posting.event_queue_loop_var.set(_posting[0])
        kopf_posting.event_queue_var.set(_posting[1])


@dataclass(frozen=True)
class Desired:
    """One object as the sweep needs it, kept in the ``desired`` index: its identity, spec and
    status without Kopf's bookkeeping, and when the watch delivered this version."""

    raw: Mapping[str, Any]
    seen: float
    pending: bool = False  # Kopf will retry a handler of this object: it owns it until then

    @property
    def uid(self) -> str:
        return str(self.raw["metadata"].get("uid") or "")


def group_of(spec: Mapping[str, Any], namespace: str) -> tuple[str, str, str] | None:
    """Which broker an object names: ``("ref", ns, name)`` or ``("secret", ns, name)``."""
    ref = spec.get("brokerRef")
    if isinstance(ref, Mapping) and ref.get("name"):
        return ("ref", str(ref.get("namespace") or namespace), str(ref["name"]))
    secret = spec.get("connectionSecret")
    if isinstance(secret, Mapping) and secret.get("name"):
        return ("secret", namespace, str(secret["name"]))
    return None


def index_desired(body: kopf.Body, *, now: float) -> dict[tuple[str, str, str], Desired]:
    """The ``desired`` index function: deleting and paused objects and those naming no broker
    drop out.

    ``{}`` rather than None for "nothing", for the reason ``reconciling.index_claim`` gives.
    """
    meta = body.metadata
    if meta.get("deletionTimestamp") or conditions.is_paused(meta):
        return {}  # a paused object is left alone until it is resumed (an update event)
    group = group_of(body.spec, str(meta.namespace))
    if group is None:
        return {}
    metadata = {key: meta.get(key) for key in METADATA}
    raw = compact({
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": metadata,
        "spec": dict(body.spec),
        "status": {k: v for k, v in body.status.items() if k not in STATUS_SKIPPED},
    })  # fmt: skip
    return {group: Desired(raw, now, pending=kopf_pending(body.status.get("kopf")))}


def compact(value: Any) -> Any:
    """A copy whose dict keys and short strings are interned: every watch event is parsed on its
    own, so each entry would otherwise hold its own copy of "observedGeneration", "Ready",
    "Declared", ... (about half of an entry's memory at 10,000 Queues)."""
    if isinstance(value, Mapping):
        return {sys.intern(str(key)): compact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [compact(item) for item in value]
    if isinstance(value, str) and len(value) <= INTERNED_LENGTH:
        return sys.intern(value)
    return value


def kopf_pending(bookkeeping: Any) -> bool:
    """Whether Kopf's progress (``status.kopf.progress``) holds a handler that has neither
    succeeded nor failed for good: a retry is due, and the object is that handler's until then
    (a pass declaring it meanwhile could lose its status write to the retry's, and the retry
    would then find a broker object it does not own)."""
    progress = bookkeeping.get("progress") if isinstance(bookkeeping, Mapping) else None
    if not isinstance(progress, Mapping):
        return False
    return any(
        isinstance(record, Mapping) and not record.get("success") and not record.get("failure")
        for record in progress.values()
    )


def judgeable(entry: Desired, *, written: float, busy: bool, pass_started: float,
              now: float, period: float) -> bool:  # fmt: skip
    """Whether a pass may judge this object now.

    Not while its handler runs (``busy``) or has a retry due (``pending``). Not when the
    operator wrote it (or ran its handler) after the index entry was delivered or after this
    pass began listing: the entry's status or the listing may predate that write, and judging
    them would turn the user's own change into drift. Such a mark holds an object back for one
    period at most, because a handler that changed nothing brings no new watch event to refresh
    the entry.
    """
    if busy or entry.pending:
        return False
    if written >= min(entry.seen, pass_started):
        return now - written >= period
    return True


async def tick(ctx: reconciling.Context, *, retry: int) -> None:
    """One object's part of a pass; status changes go to ``ctx.patch``."""
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
        # object until then; a pass now would be a second write beside it.
        return
    ready = conditions.find(ctx.status.get("conditions"), reconciling.READY) or {}
    # A mismatch is observed again, not re-declared: a declare would only be refused
    # (inequivalent) and turn the one BrokerMismatch Warning into a second, BrokerRejected.
    mismatch = ready.get("reason") == errors.BrokerMismatchError.reason
    if ready.get("status") != "True" and not mismatch:
        await _redeclare(ctx, target, model, name, retry)
        return
    try:
        observation = await ctx.ops.observe(target, model, name)
        if observation.mismatched:
            # One Warning (BrokerMismatch, posted by ``fail`` when Ready changes), not a
            # DriftDetected on every pass beside it for the same problem.
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
        reconciling.declared(ctx, target, name)
    if observation.stats is not None and config.queue_stats():
        _write_stats(ctx, observation.stats)


async def _redeclare(
    ctx: reconciling.Context, target: references.Target, model: Any, name: str, retry: int
) -> None:
    try:
        await reconciling.declare_into(ctx, target, model, name)
    except errors.HutchError as error:
        reconciling.fail(ctx, error, retry, raise_=False)
        return
    reconciling.declared(ctx, target, name)


def _write_stats(ctx: reconciling.Context, stats: dict[str, Any]) -> None:
    """At most one status patch per object per period, and none when nothing moved.

    A policy field the status does not have and the listing says is empty has not moved: a
    Queue's create leaves them out (``translators.fresh_queue_stats``), and a first pass over
    10,000 fresh Queues must not write each of them to say "no policy"."""
    moved = conditions.status_patch(ctx.status, stats)
    for key in translators.POLICY_STATS:
        if key in moved and key not in ctx.status and not moved[key]:
            del moved[key]
    if not moved:
        return
    reconciling.write_status(ctx, {**stats, "statsUpdatedAt": conditions.now()})


def schedule(
    due: dict[tuple[str, tuple[str, str, str]], float],
    groups: list[tuple[str, tuple[str, str, str]]],
    *,
    now: float,
    period: float,
) -> dict[tuple[str, tuple[str, str, str]], float]:
    """When each group's next pass is due: kept for known groups, a random point of the next
    period for new ones; groups that hold no objects any more are dropped."""
    return {key: due[key] if key in due else now + random.uniform(0, period) for key in groups}


@dataclass
class PassReport:
    """What one (broker, kind) pass did: for metrics, the benchmark and tests."""

    objects: int = 0
    judged: int = 0
    slices: int = 1
    status_writes: int = 0


class Sweeper:
    """The operator's one sweep task over every kind's ``desired`` index.

    ``indices`` is Kopf's mapping of index id → live index, as startup handlers receive it;
    ``kinds`` maps each kind's ``desired`` index id to its KindOps and claims index id.
    """

    def __init__(
        self,
        indices: Mapping[str, Any],
        kinds: Mapping[str, tuple[reconciling.KindOps, str]],
        *,
        brokers: str,
        vhost_claims: str,
    ) -> None:
        self.indices = indices
        self.kinds = kinds
        self.brokers = brokers
        self.vhost_claims = vhost_claims

    def groups(self) -> list[tuple[str, tuple[str, str, str]]]:
        """Every (desired index id, broker group) holding objects now."""
        found: list[tuple[str, tuple[str, str, str]]] = []
        for index_id in self.kinds:
            index = self.indices.get(index_id) or {}
            found.extend((index_id, group) for group in list(index))
        return sorted(found)

    async def run(self) -> None:
        """Forever: every (kind, broker group) is swept once per period, the first pass at a
        random point of the first period (as the per-object timers were), so groups spread
        over the period instead of starting together; new groups are noticed within a second."""
        due: dict[tuple[str, tuple[str, str, str]], float] = {}
        while True:
            period = config.sync_period()
            now = time.monotonic()
            due = schedule(due, self.groups(), now=now, period=period)
            ready = sorted((when, key) for key, when in due.items() if when <= now)
            for _, (index_id, group) in ready:
                _adopt_posting()
                try:
                    await self.sweep(index_id, group)
                except Exception:  # a bug in one pass must not end every later sweep
                    logger.exception("drift sweep of %s %s failed", index_id, group)
                due[(index_id, group)] = time.monotonic() + period  # a full period between passes
            nearest = min(due.values(), default=now + 1.0)
            await asyncio.sleep(min(1.0, max(0.0, nearest - time.monotonic())))

    async def sweep(self, index_id: str, group: tuple[str, str, str]) -> PassReport:
        """One pass over one (broker, kind): judge every object, write what changed."""
        ops, claims_id = self.kinds[index_id]
        entries: list[Desired] = list((self.indices.get(index_id) or {}).get(group) or ())
        report = PassReport(objects=len(entries))
        period = config.sync_period()
        with snapshots.scope(), metrics.SWEEP_PASS_SECONDS.labels(ops.kind.kind).time():
            pass_started = time.monotonic()
            for position, entry in enumerate(entries):
                if position and position % SLICE == 0:
                    report.slices += 1
                    await asyncio.sleep(0)  # handlers and other brokers' passes run here
                uid = entry.uid
                if not judgeable(entry, written=snapshots.written(uid), busy=snapshots.busy(uid),
                                 pass_started=pass_started, now=time.monotonic(),
                                 period=period):  # fmt: skip
                    continue
                report.judged += 1
                report.status_writes += await self._judge(ops, claims_id, entry)
        snapshots.forget_before(pass_started - 2 * period)
        metrics.SWEEP_OBJECTS.labels(ops.kind.kind).inc(report.judged)
        return report

    async def _judge(self, ops: reconciling.KindOps, claims_id: str, entry: Desired) -> int:
        """1 when the object's status was written."""
        body = kopf.Body(entry.raw)  # type: ignore[arg-type]
        patch = kopf.Patch()
        ctx = reconciling.Context(
            ops=ops,
            body=body,
            patch=patch,
            brokers=self.indices.get(self.brokers) or {},
            claims=self.indices.get(claims_id) or {},
            vhost_claims=self.indices.get(self.vhost_claims) or {},
        )
        try:
            await tick(ctx, retry=0)
        except Exception:  # one object's bug must not stop the pass over the others
            logger.exception("drift sweep of %s %s/%s failed", ops.kind.kind, ctx.namespace,
                             ctx.name)  # fmt: skip
            return 0
        if not patch:
            return 0
        return await write(ops, entry, dict(patch))


async def write(ops: reconciling.KindOps, entry: Desired, patch: Mapping[str, Any]) -> int:
    """The pass's status patch, only if the object is still the version it judged."""
    meta = entry.raw["metadata"]
    path = kube.object_path(common.API_VERSION, ops.kind.plural, meta["namespace"], meta["name"])
    body = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, **patch}
    try:
        await kube.api().merge_patch(path + "/status", body)
    except errors.KubeError as exc:
        if exc.status == 409:  # changed since: the next pass judges the new version
            return await _record_ownership(ops, path, patch)
        if exc.status != 404:  # 404: gone
            logger.warning("drift sweep: status of %s %s/%s not written: %s", ops.kind.kind,
                           meta["namespace"], meta["name"], exc)  # fmt: skip
        return 0
    metrics.SWEEP_STATUS_WRITES.labels(ops.kind.kind).inc()
    return 1


async def _record_ownership(ops: reconciling.KindOps, path: str, patch: Mapping[str, Any]) -> int:
    """After a lost race: if this pass declared the broker object, that fact is written anyway.

    Ownership is what lets a later delete remove the broker object and a later declare (of
    vhosts, users, permissions) not refuse it as someone else's; losing it to a handler's
    concurrent status write would leave the object refusing what it made itself.
    """
    status = patch.get("status") or {}
    if status.get("declared") is not True:
        return 0
    owned = {"status": {"declared": True, "brokerEndpoint": status.get("brokerEndpoint")}}
    try:
        await kube.api().merge_patch(path + "/status", owned)
    except errors.KubeError:
        return 0
    metrics.SWEEP_STATUS_WRITES.labels(ops.kind.kind).inc()
    return 1
