"""Vhost handlers: declare (refusing to take over a vhost it did not create), delete only
when empty unless told otherwise, and correct description/tags drift."""

from __future__ import annotations

import contextlib

from hutch_operator.core import brokerclient, errors, references
from hutch_operator.models import kinds, vhosts
from hutch_operator.topology import reconciling, snapshots, tenancy
from hutch_operator.topology.handlers import registration

Spec = vhosts.VhostSpec


async def declare(target: references.Target, spec: Spec, name: str, owned: bool) -> bool:
    record_name(name)
    request = tenancy.vhost_put(spec, name, hutch=await target.client.is_hutch())
    await reconciling.refuse_unowned(
        target, tenancy.vhost_path(name), f"vhost {name}", owned=owned, adopt=spec.adopt
    )
    await target.client.call(request)
    await apply_limits(target, tenancy.vhost_limits_path(name), tenancy.limit_values(spec.limits))
    return True


def record_name(name: str) -> None:
    """``status.name``: the vhost's name in the broker, which the VHOST printer column shows.
    ``spec.name`` defaults to ``metadata.name`` in the operator, not in the schema, so a column
    on ``spec.name`` was empty for most Vhosts. Written before the broker is asked, so a
    refused Vhost (AlreadyExists) shows which vhost it means too."""
    subject = reconciling.subject()
    if subject.status.get("name") != name:
        subject.patch.status["name"] = name


async def apply_limits(target: references.Target, base: str, wanted: dict[str, int]) -> None:
    """Brings the broker's limits of a vhost or user to ``wanted`` (in place, no re-create)."""
    current = tenancy.listed_limits(await target.client.call(brokerclient.Request("GET", base)))
    for request in tenancy.limit_requests(base, wanted, current):
        await target.client.call(request)


async def delete(target: references.Target, spec: Spec, name: str) -> tuple[str, str] | None:
    if spec.delete_if_empty:
        try:
            listed = await target.client.call(tenancy.vhost_queues(name))
        except errors.ObjectNotFoundError:
            return None
        queues, messages = tenancy.vhost_contents(listed or [])
        if queues:
            return "DeleteSkippedNotEmpty", (
                f"vhost {name} holds {queues} queues ({messages} messages): kept in broker; "
                "set deleteIfEmpty: false to delete it with everything in it"
            )
    with contextlib.suppress(errors.ObjectNotFoundError):
        await target.client.call(brokerclient.Request("DELETE", tenancy.vhost_path(name)))
    return None


async def observe(target: references.Target, spec: Spec, name: str) -> reconciling.Observation:
    request = brokerclient.Request("GET", "/api/vhosts")
    listing = await snapshots.get(target.client, target.key, "vhost", request)
    listed = listing.first(name=name)
    if listed is None:
        return reconciling.Observation(missing=True)
    changed, fixed = tenancy.vhost_differences(spec, listed)
    request = brokerclient.Request("GET", "/api/vhost-limits")
    limits = await snapshots.get(target.client, target.key, "vhost-limits", request)
    current = tenancy.listed_limits(limits.all(vhost=name))
    if current != tenancy.limit_values(spec.limits):
        changed.append("limits")
    return reconciling.Observation(changed=changed, mismatched=fixed)


OPS = reconciling.KindOps(
    kind=kinds.VHOST,
    identity=lambda spec, name: ("vhost", name),
    declare=declare,
    delete=delete,
    observe=observe,
    label="vhost",
)
registration.register(OPS)
