"""The one reconcile skeleton every topology kind shares.

Contract: docs/contracts/operator.md#handlers, #errors, #deletion and #conflicts.

A kind supplies a ``KindOps`` (identity, declare, delete, observe); this module does the rest
once: parse the spec, resolve the broker, decide conflicts, map errors to the Ready condition,
events and Kopf's retry classes, set ``observedGeneration``, and write status only when it
changed. Handlers are one call into here.
"""

from __future__ import annotations

import contextvars
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
import pydantic

from hutch_operator.core import brokerclient, conditions, config, errors, kube, metrics, references
from hutch_operator.models import common, kinds
from hutch_operator.topology import abandoned, conflicts, snapshots

READY = "Ready"
NUDGE_ANNOTATION = "hutch.dev/reconcile-requested"


@dataclass(frozen=True)
class Observation:
    """What the sweep found for one object in the broker's listing."""

    missing: bool = False
    changed: list[str] = field(default_factory=list)  # mutable differences, fixed by ``declare``
    mismatched: list[str] = field(default_factory=list)  # immutable differences: never fixed
    stats: dict[str, Any] | None = None


# (target, model, broker object name, owned: this object's earlier declare made it) → wrote
Declare = Callable[[references.Target, Any, str, bool], Awaitable[bool]]
Delete = Callable[[references.Target, Any, str], Awaitable[tuple[str, str] | None]]
Observe = Callable[[references.Target, Any, str], Awaitable[Observation]]
Stats = Callable[[references.Target, Any, str], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class KindOps:
    kind: kinds.Kind
    identity: Callable[[Any, str], tuple[str, ...]]  # (model, broker object name) → identity
    declare: Declare  # True when it wrote to the broker
    delete: Delete  # (event reason, message) when it deliberately kept the object
    observe: Observe
    label: str  # "queue", "exchange", ... for messages
    stats: Stats | None = None  # live status fields, written at once after a declare


@dataclass
class Context:
    """One handler invocation's Kopf kwargs, as far as reconciling needs them."""

    ops: KindOps
    body: kopf.Body
    patch: kopf.Patch
    brokers: references.BrokerIndex
    claims: Mapping[Any, Any]
    vhost_claims: Mapping[Any, Any] = field(default_factory=dict)  # the Vhost kind's claims

    def __post_init__(self) -> None:
        meta = self.body.metadata
        _SUBJECT.set(Subject(self.namespace, self.name, str(meta.get("uid", "")),
                             self.body.status, self.patch))  # fmt: skip

    @property
    def namespace(self) -> str:
        return str(self.body.metadata.namespace)

    @property
    def name(self) -> str:
        return str(self.body.metadata.name)

    @property
    def generation(self) -> int | None:
        value = self.body.metadata.get("generation")
        return int(value) if value is not None else None

    @property
    def status(self) -> Mapping[str, Any]:
        return self.body.status


@dataclass(frozen=True)
class Subject:
    """The object being reconciled, for kinds whose broker work needs more than its spec: a
    User reads and writes its credentials Secret (owned by the User) and records the Secret's
    version in its status. Set per handler task by ``Context``; Kopf runs each handler in a
    task of its own, so one object's subject never leaks into another's."""

    namespace: str
    name: str
    uid: str
    status: Mapping[str, Any]
    patch: kopf.Patch


_SUBJECT: contextvars.ContextVar[Subject] = contextvars.ContextVar("hutch_subject")


def subject() -> Subject:
    """The object the running handler reconciles (LookupError outside a handler)."""
    return _SUBJECT.get()


def parse(ops: KindOps, spec: Mapping[str, Any]) -> Any:
    try:
        return ops.kind.spec.model_validate(dict(spec))
    except pydantic.ValidationError as exc:
        detail = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise errors.SpecError(f"invalid spec: {detail}") from exc


def object_name(model: Any, ctx: Context) -> str:
    name = getattr(model, "name", None) or ctx.name
    if ctx.ops.label in {"queue", "exchange"} and name.startswith("amq."):
        raise errors.SpecError(f"{ctx.ops.label} names starting with amq. are reserved")
    return str(name)


def claim_key(ops: KindOps, endpoint: str, model: Any, name: str) -> tuple[str, ...]:
    """(normalised broker endpoint, vhost, kind identity): what the broker object *is*."""
    return (endpoint, model.vhost, *ops.identity(model, name))


def claimed_endpoint(model: Any, namespace: str, status: Mapping[str, Any]) -> str | None:
    """The endpoint an object claims on without resolving anything (index, deletion).

    A ``brokerRef`` resolves purely; a ``connectionSecret``'s endpoint is in the Secret, which
    the index must not read, so it is the one the last reconcile recorded in status.
    """
    endpoint = references.broker_ref_endpoint(model, namespace)
    if endpoint is None:
        recorded = status.get("brokerEndpoint")
        endpoint = str(recorded) if recorded else None
    return endpoint


def my_claim(body: kopf.Body, model: Any = None) -> conflicts.Claim:
    meta = body.metadata
    namespace = str(meta.namespace)
    broker = references.broker_ref_name(model, namespace) if model is not None else ""
    return conflicts.Claim(
        str(meta.get("creationTimestamp", "")), namespace, str(meta.name), str(meta.uid), broker
    )


def index_claim(ops: KindOps, body: kopf.Body) -> dict[tuple[str, ...], conflicts.Claim]:
    """The per-kind conflict index function; deleting or invalid objects claim nothing.

    Returns ``{}`` rather than None for "nothing": Kopf 1.45 stores a mapping as the object's
    complete set of keys (dropping the rest) but ignores None, which would leave a deleting
    winner's claim in place until its DELETED event.
    """
    if body.metadata.get("deletionTimestamp"):
        return {}
    try:
        model: Any = ops.kind.spec.model_validate(dict(body.spec))
        name = getattr(model, "name", None) or str(body.metadata.name)
        endpoint = claimed_endpoint(model, str(body.metadata.namespace), body.status)
    except (pydantic.ValidationError, errors.HutchError):
        return {}
    if endpoint is None:
        return {}
    return {claim_key(ops, endpoint, model, name): my_claim(body, model)}


WAITING_REASONS = frozenset({"BrokerNotReady", "BrokerUnavailable"})


def index_waiting(ops: KindOps, body: kopf.Body) -> dict[tuple[str, str], tuple[str, str, str]]:
    """The per-kind index of objects waiting for their Broker: ``(broker ns, name)`` →
    ``(plural, ns, name)``.

    Why: an object that failed with ``BrokerNotReady`` or ``BrokerUnavailable`` (in a handler or
    a sweep tick) would otherwise wait for its own retry or next tick, up to the whole sweep
    period, although its Broker turned Available in seconds. The Broker's status timer wakes
    these objects (``wake``) as soon as it sees the broker answer. Only ``brokerRef`` objects:
    a ``connectionSecret`` broker has no Broker CR to watch.
    """
    if body.metadata.get("deletionTimestamp") or conditions.is_paused(body.metadata):
        return {}
    ready = conditions.find(body.status.get("conditions"), READY) or {}
    if ready.get("status") != "False" or ready.get("reason") not in WAITING_REASONS:
        return {}
    ref = body.spec.get("brokerRef")
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return {}
    namespace = str(body.metadata.namespace)
    broker = (str(ref.get("namespace") or namespace), str(ref["name"]))
    return {broker: (ops.kind.plural, namespace, str(body.metadata.name))}


def wakes(stored: Any, observed: Any) -> bool:
    """Whether a Broker's status pass wakes the objects waiting for it: only when both its
    *stored* Available condition and this pass's observation (the status patch's conditions,
    or the stored ones when unchanged) are True.

    Why both: the woken objects resolve through the broker_facts index, which sees the stored
    status, and would fail again with BrokerNotReady before it says True. The stored status lags
    the broker by up to one period, though: an object nudged at a broker that has just died
    fails with BrokerUnavailable, Kopf backs off (5 s, then 10 s, ...) and ignores every later
    nudge while it sleeps, so it would miss the broker's return by that long.
    """
    return conditions.is_true(stored, "Available") and conditions.is_true(observed, "Available")


async def nudge(plural: str, namespace: str, name: str) -> None:
    """Annotates an object so its declare handler runs now (operator.md#conflicts); gone is fine."""
    path = kube.object_path(common.API_VERSION, plural, namespace, name)
    body = {"metadata": {"annotations": {NUDGE_ANNOTATION: conditions.now()}}}
    try:
        await kube.api().merge_patch(path, body)
    except errors.KubeError as exc:
        if exc.status != 404:
            raise


async def wake(waiting: list[tuple[str, str, str]]) -> None:
    """Re-reconciles objects that waited for a Broker that is Available again."""
    for plural, namespace, name in waiting:
        try:
            await nudge(plural, namespace, name)
        except errors.KubeError:
            continue  # the next status pass tries again


def admits(
    brokers: references.BrokerIndex, vhost_namespace: str | None = None
) -> Callable[[conflicts.Claim], bool]:
    """Whether a claim counts: a brokerRef claim from a namespace its Broker does not admit
    never reaches the broker, so it must not block an admitted one. An unknown Broker admits
    (ownership must not move because a Broker is briefly missing from the index). Likewise a
    claim from outside ``vhost_namespace``, the namespace whose Vhost owns the vhost."""

    def check(claim: conflicts.Claim) -> bool:
        if vhost_namespace is not None and claim.namespace != vhost_namespace:
            return False
        if not claim.broker:
            return True
        namespace, _, name = claim.broker.partition("/")
        facts = references.broker_facts(brokers, namespace, name)
        return facts is None or facts.allows(claim.namespace)

    return check


def vhost_owner(ctx: Context, endpoint: str, vhost: str) -> conflicts.Claim | None:
    """The Vhost object that manages ``vhost`` on this broker, if any (its winning claim).

    Why: a Broker admits whole namespaces, so without this rule team-b could declare queues
    in, or grant its user permissions on, the vhost team-a's Vhost made. Once a Vhost object
    manages a vhost, objects inside it (queues, exchanges, bindings, policies, permissions,
    topic permissions) are managed from that Vhost's namespace only. Vhosts nobody declared
    through a Vhost object (``/``, or ones made by hand) stay open to every admitted namespace.
    """
    if not vhost:
        return None  # a Vhost or a User: broker-wide objects
    key = (endpoint, "", "vhost", vhost)
    return conflicts.winner(conflicts.counted(conflicts.claims(ctx.vhost_claims, key),
                                              admits(ctx.brokers)))  # fmt: skip


def check_vhost(ctx: Context, target: references.Target, model: Any) -> str | None:
    """NamespaceNotAllowed when another namespace's Vhost owns the object's vhost; else the
    owning namespace (None when no Vhost object owns it)."""
    owner = vhost_owner(ctx, target.key, model.vhost)
    if owner is None:
        return None
    if owner.namespace != ctx.namespace:
        raise errors.NamespaceNotAllowedError(
            f"vhost {model.vhost!r} is managed by Vhost {owner.ref}: objects in it are managed "
            f"from namespace {owner.namespace} only"
        )
    return owner.namespace


def record_endpoint(ctx: Context, target: references.Target) -> None:
    """Writes the resolved endpoint to status: the claim of a connectionSecret object, and the
    broker its ownership refers to (a changed endpoint means nothing there was declared yet)."""
    recorded = ctx.status.get("brokerEndpoint")
    desired: dict[str, Any] = {"brokerEndpoint": target.key}
    if recorded is not None and recorded != target.key and ctx.status.get("declared"):
        desired["declared"] = False
    write_status(ctx, desired)


def write_status(ctx: Context, desired: dict[str, Any]) -> None:
    changed = conditions.status_patch(ctx.status, desired)
    for key, value in changed.items():
        ctx.patch.status[key] = value


def set_ready(ctx: Context, ok: bool, reason: str, message: str, **extra: Any) -> bool:
    """Updates Ready (and extra status keys); True when Ready's status or reason changed.

    Starts from the conditions this handler already patched (``note_pause``), if any."""
    before = conditions.find(ctx.status.get("conditions"), READY)
    updated = conditions.upsert(
        ctx.patch.status.get("conditions") or ctx.status.get("conditions"),
        type_=READY,
        status=ok,
        reason=reason,
        message=message,
        generation=ctx.generation,
    )
    write_status(
        ctx,
        {"observedGeneration": ctx.generation, "conditions": updated, "conflictWith": None} | extra,
    )
    return before is None or (before.get("status"), before.get("reason")) != (
        "True" if ok else "False",
        reason,
    )


def retry_delay(error: errors.HutchError, retry: int) -> float:
    if error.backoff:
        step = min(error.backoff_cap, error.backoff_base * 2**retry)
        return float(step * random.uniform(0.8, 1.2))
    return float(error.delay or 10.0)


def fail(ctx: Context, error: errors.HutchError, retry: int, *, raise_: bool = True) -> None:
    """Ready=False with the error's reason; a Warning event when the reason is new."""
    metrics.RECONCILES.labels(ctx.ops.kind.kind, error.reason).inc()
    if set_ready(ctx, False, error.reason, str(error)):
        kopf.warn(ctx.body, reason=error.reason, message=str(error))
    if not raise_:
        return
    if error.delay is None and not error.backoff:
        raise kopf.PermanentError(str(error)) from error
    raise kopf.TemporaryError(str(error), delay=retry_delay(error, retry)) from error


def check_conflict(ctx: Context, target: references.Target, model: Any, name: str) -> bool:
    """Ready=False ResourceConflict when an older admitted object claims the same broker object.

    NamespaceNotAllowed (raised) first when another namespace's Vhost owns the vhost."""
    vhost_namespace = check_vhost(ctx, target, model)
    claimants = conflicts.claims(ctx.claims, claim_key(ctx.ops, target.key, model, name))
    me = my_claim(ctx.body, model)
    owner = conflicts.owner(claimants, me, admits(ctx.brokers, vhost_namespace))
    if owner.uid == me.uid:
        return False
    message = f"managed by {ctx.ops.kind.kind} {owner.ref}"
    if set_ready(ctx, False, "ResourceConflict", message, conflictWith=owner.ref):
        kopf.warn(ctx.body, reason="ResourceConflict", message=message)
    return True


RECORDED_CAUSES = frozenset({"resume", "create"})


async def declare(ctx: Context, *, cause: str, retry: int) -> None:
    """on.create / on.update / on.resume.

    An object whose status already says Ready for this generation is not declared again on
    resume or create, nor by a retry of any cause: drift is the sweep's job, so restarts cost
    no broker calls. A create cause can carry such a status when an earlier operator process
    declared the object and stopped before Kopf recorded the creation as handled: Kopf's delayed
    retry (kept in the object's status) then fires in the next process. On the node, a replaced
    operator Pod re-posted 22 Bindings its predecessor had declared on its way out. A retry
    finds it when a sweep tick or a wake-up declared the object after the failed attempt. A
    first update attempt (a spec change, or the nudge annotation) always declares.
    """
    if note_pause(ctx):
        return
    recorded = ctx.status.get("observedGeneration") == ctx.generation
    if (
        (cause in RECORDED_CAUSES or retry > 0)
        and recorded
        and conditions.is_true(ctx.status.get("conditions"), READY)
    ):
        return
    with (
        snapshots.handling(uid(ctx)),
        metrics.RECONCILE_SECONDS.labels(ctx.ops.kind.kind).time(),
    ):
        await _declare_timed(ctx, retry)


def note_pause(ctx: Context) -> bool:
    """Whether the object is paused (``conditions.PAUSE_ANNOTATION``); its condition says so."""
    paused = conditions.is_paused(ctx.body.metadata)
    updated = conditions.pause_update(ctx.status.get("conditions"), paused, ctx.generation)
    if updated is not None:
        write_status(ctx, {"conditions": updated})
    return paused


def uid(ctx: Context) -> str:
    return str(ctx.body.metadata.get("uid") or "")


async def _declare_timed(ctx: Context, retry: int) -> None:
    try:
        model = parse(ctx.ops, ctx.body.spec)
        name = object_name(model, ctx)
        target = await references.resolve(model, ctx.namespace, ctx.brokers)
        record_endpoint(ctx, target)
        if check_conflict(ctx, target, model, name):
            return
        await declare_into(ctx, target, model, name)
    except errors.HutchError as error:
        fail(ctx, error, retry)
        return
    declared(ctx, target, name)
    await first_stats(ctx, target, model, name)


async def first_stats(ctx: Context, target: references.Target, model: Any, name: str) -> None:
    """Live stats right after a declare (one GET of this object): the Messages/Consumers
    columns stayed empty until the first sweep tick, up to a whole period. Best effort: the
    object is declared whatever this call does."""
    if ctx.ops.stats is None or not config.queue_stats():
        return
    try:
        stats = await ctx.ops.stats(target, model, name)
    except errors.HutchError:
        return
    if conditions.status_patch(ctx.status, stats):
        write_status(ctx, {**stats, "statsUpdatedAt": conditions.now()})


def declared(ctx: Context, target: references.Target, name: str) -> None:
    """Ready=True and ownership: from now on deleting this object may delete the broker object.

    No Event: the Ready condition (reason ``Declared``, its ``lastTransitionTime`` and
    ``observedGeneration``) already says it, and an Event per declared object was half of the
    operator's Kubernetes writes (10,000 POSTs for 10,000 Queues, on an apiserver that was the
    bottleneck). Events are kept for what needs a human: failures, drift, kept objects.
    """
    set_ready(
        ctx, True, "Declared", f"{ctx.ops.label} {name} declared",
        declared=True, brokerEndpoint=target.key,
    )  # fmt: skip
    metrics.RECONCILES.labels(ctx.ops.kind.kind, "Declared").inc()


async def declare_into(ctx: Context, target: references.Target, model: Any, name: str) -> bool:
    owned = conflicts.owns(ctx.status, target.key)
    try:
        return await ctx.ops.declare(target, model, name, owned)
    except errors.AuthenticationFailedError:
        references.forget_secrets()
        await brokerclient.POOL.drop(target.client)
        raise
    except errors.ObjectNotFoundError as exc:
        raise errors.VhostNotFoundError(f"vhost {model.vhost!r} not found: {exc}") from exc
    finally:
        # Even a refused declare may have written part of it (a limit changed in place).
        snapshots.wrote(uid(ctx))


async def refuse_unowned(
    target: references.Target, path: str, what: str, *, owned: bool, adopt: bool
) -> None:
    """The ownership rule for vhosts, users and permissions, which a PUT silently overwrites
    (a user's password, a vhost's description) where a queue declare would only be refused as
    inequivalent: an object that did not create the broker object refuses to take it over
    unless it says ``adopt: true``. Not owning it, it never deletes it either."""
    if owned or adopt:
        return
    try:
        await target.client.call(brokerclient.Request("GET", path))
    except errors.ObjectNotFoundError:
        return
    raise errors.AlreadyExistsError(
        f"{what} already exists in the broker and was not created by this object: left alone; "
        "set spec.adopt: true to manage it (deleting this object then deletes it)"
    )


async def delete(ctx: Context, *, runtime: float, retry: int) -> None:
    """on.delete: decide in the order of operator.md#deletion; never block past deleteTimeout."""
    try:
        model = parse(ctx.ops, ctx.body.spec)
        name = object_name(model, ctx)
    except errors.SpecError:
        return  # nothing was ever declared
    me = my_claim(ctx.body, model)
    endpoint = claimed_endpoint(model, ctx.namespace, ctx.status)
    index = (
        conflicts.claims(ctx.claims, claim_key(ctx.ops, endpoint, model, name)) if endpoint else []
    )
    claimants = conflicts.counted(conflicts.others(index, me.uid), admits(ctx.brokers))
    if any(claim < me for claim in claimants):
        return  # a conflict loser never touched the broker object
    if claimants:  # before retain: a departing winner always wakes its successor
        await _hand_over(ctx, claimants[0])
        return
    if model.deletion_policy == "retain":
        kopf.info(ctx.body, reason="Retained", message=f"{ctx.ops.label} {name} kept in broker")
        return
    if not conflicts.owns(ctx.status):
        _not_owned(ctx, name)
        return
    try:
        target = await references.resolve(model, ctx.namespace, ctx.brokers, deleting=True)
        if not conflicts.owns(ctx.status, target.key):
            _not_owned(ctx, name)
            return
        with snapshots.handling(uid(ctx)):
            kept = await ctx.ops.delete(target, model, name)
    except (errors.BrokerNotFoundError, errors.ConnectionSecretInvalidError) as exc:
        kopf.warn(ctx.body, reason="BrokerGone", message=f"{exc}; finalizer released")
        return
    except errors.HutchError as exc:
        if exc.delay is None and not exc.backoff:
            kopf.warn(ctx.body, reason="DeleteFailed", message=f"{exc}; finalizer released")
            return
        left = config.delete_timeout() - runtime
        if left <= 0:
            message = f"broker unreachable for {runtime:.0f}s ({exc}); {ctx.ops.label} left"
            kopf.warn(ctx.body, reason="DeleteAbandoned", message=message)
            await _list_abandoned(ctx, model, name)
            return
        # Say so at once: Ready=True Declared for the whole bound hid a stuck deletion.
        blocked = (
            f"{ctx.ops.label} {name} not deleted yet: {exc}; retried for up to "
            f"{config.delete_timeout():.0f}s, then left in the broker and "
            + (
                "listed on its Broker"
                if model.broker_ref is not None  # connectionSecret: no Broker keeps a list
                else "named in a DeleteAbandoned Event (delete it there by hand)"
            )
        )
        if set_ready(ctx, False, "DeleteBlocked", blocked):
            kopf.warn(ctx.body, reason="DeleteBlocked", message=blocked)
        # Never sleep past deleteTimeout: a 60 s AuthenticationFailed delay would otherwise
        # hold a deleting namespace for up to a minute longer than the documented bound.
        delay = min(retry_delay(exc, retry), max(1.0, left))
        raise kopf.TemporaryError(str(exc), delay=delay) from exc
    if kept is not None:
        kopf.warn(ctx.body, reason=kept[0], message=kept[1])


async def _list_abandoned(ctx: Context, model: Any, name: str) -> None:
    """Adds the left-behind broker object to its Broker's ``status.abandoned`` (``brokerRef``
    objects only), from where the Broker deletes it once it answers (``abandoned``)."""
    if model.broker_ref is None:
        return
    item = abandoned.entry(ctx.ops.kind.kind, ctx.namespace, ctx.name, ctx.body.spec,
                           model.vhost, name)  # fmt: skip
    try:
        await abandoned.update(model.broker_ref.namespace or ctx.namespace,
                               model.broker_ref.name, [item], set())  # fmt: skip
    except errors.KubeError as exc:
        message = f"{ctx.ops.label} {name} not listed in the Broker's status.abandoned: {exc}"
        kopf.warn(ctx.body, reason="DeleteAbandoned", message=message)


async def clean_abandoned(
    ops: KindOps, item: Mapping[str, Any], brokers: references.BrokerIndex, claims: Any
) -> str:
    """Deletes one abandoned broker object (``abandoned.Cleaner``) unless an object claims it
    now; a HutchError leaves it listed for the next pass."""
    try:
        model = parse(ops, item.get("spec") or {})
    except errors.SpecError as exc:
        return f"left in the broker: {exc}"
    name = str(item.get("object"))
    target = await references.resolve(model, str(item.get("namespace")), brokers, deleting=True)
    claimants = conflicts.counted(
        conflicts.claims(claims, claim_key(ops, target.key, model, name)), admits(brokers)
    )
    if claimants:
        return f"left in the broker: now managed by {ops.kind.kind} {claimants[0].ref}"
    kept = await ops.delete(target, model, name)
    return f"left in the broker: {kept[1]}" if kept else "deleted"


def _not_owned(ctx: Context, name: str) -> None:
    message = (
        f"{ctx.ops.label} {name} was never declared by this object (its declaration was refused "
        "or never succeeded): left alone in the broker"
    )
    kopf.warn(ctx.body, reason="DeleteSkippedNotOwned", message=message)


async def _hand_over(ctx: Context, successor: conflicts.Claim) -> None:
    try:
        await nudge(ctx.ops.kind.plural, successor.namespace, successor.name)
    except errors.KubeError as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc
    kopf.info(ctx.body, reason="HandedOver", message=f"now managed by {successor.ref}")
