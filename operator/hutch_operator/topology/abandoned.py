"""Orphans a deleted CR left on an unreachable broker: listed on the Broker, deleted later.

Why: a delete that waits ``HUTCH_DELETE_TIMEOUT`` for an unreachable broker releases the
finalizer (``DeleteAbandoned``) so namespace deletion never hangs, but the broker object it
declared came back with the broker and nothing listed or removed it. A ``brokerRef`` object
that owned its broker object (``status.declared``) now appends it to the Broker's
``status.abandoned``; the Broker's status timer, once the Broker is Available, deletes each one
with its kind's own delete (so ``deleteIfEmpty`` still holds) unless another CR has claimed the
same broker object meanwhile, and drops it from the list. A ``connectionSecret`` object has no
Broker to list it on: its ``DeleteAbandoned`` event is all there is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from hutch_operator.core import conditions, errors, kube
from hutch_operator.models import common

ATTEMPTS = 5


def entry(kind: str, namespace: str, name: str, spec: Mapping[str, Any], vhost: str,
          obj: str) -> dict[str, Any]:  # fmt: skip
    return {"kind": kind, "namespace": namespace, "name": name, "vhost": vhost, "object": obj,
            "spec": dict(spec), "abandonedAt": conditions.now()}  # fmt: skip


def identity(item: Mapping[str, Any]) -> tuple[str, str, str]:
    """One entry per deleted CR (kind, namespace, name)."""
    return str(item.get("kind")), str(item.get("namespace")), str(item.get("name"))


def merged(
    listed: list[Any], add: list[dict[str, Any]], drop: set[tuple[str, str, str]]
) -> list[Any]:
    """The list after adding ``add`` (replacing same-CR entries) and removing ``drop``."""
    replaced = {identity(item) for item in add}
    kept = [item for item in listed if identity(item) not in replaced | drop]
    return kept + [item for item in add if identity(item) not in drop]


async def update(namespace: str, broker: str, add: list[dict[str, Any]],
                 drop: set[tuple[str, str, str]]) -> None:  # fmt: skip
    """Read-modify-write of ``status.abandoned``, guarded by resourceVersion: many objects of a
    deleted namespace are abandoned at the same moment, and a plain merge patch of the list
    would keep only the last writer's entry."""
    path = kube.object_path(common.API_VERSION, "brokers", namespace, broker)
    for _ in range(ATTEMPTS):
        body = await kube.api().get(path)
        if body is None:
            return
        listed = list((body.get("status") or {}).get("abandoned") or [])
        wanted = merged(listed, add, drop)
        if wanted == listed:
            return
        patch = {"metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                 "status": {"abandoned": wanted}}  # fmt: skip
        try:
            await kube.api().merge_patch(path + "/status", patch)
            return
        except errors.KubeError as exc:
            if exc.status != 409:
                raise
    raise errors.KubeError(f"status.abandoned of Broker {namespace}/{broker}: conflicts")


# (entry) → "deleted" | "kept: <why>" | "claimed by <ns/name>"; raises HutchError to retry later
Cleaner = Callable[[Mapping[str, Any]], Awaitable[str]]


async def clean(namespace: str, broker: str, listed: list[Any], cleaner: Cleaner) -> list[str]:
    """Deletes what it can of ``listed`` and drops it from the Broker's list; the messages say
    what happened to each (Broker events)."""
    done: set[tuple[str, str, str]] = set()
    messages: list[str] = []
    for item in listed:
        what = f"{item.get('kind')} {item.get('namespace')}/{item.get('name')}"
        try:
            outcome = await cleaner(item)
        except errors.HutchError:
            continue  # still unreachable or refused: stays listed, tried next pass
        done.add(identity(item))
        messages.append(f"abandoned {what} ({item.get('vhost')}/{item.get('object')}): {outcome}")
    if done:
        await update(namespace, broker, [], done)
    return messages
