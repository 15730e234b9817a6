"""Binding handlers: a binding's identity is all its fields, so drift can only be "missing".

Delete finds the ``properties_key`` by listing the source→destination bindings and matching
routing key and arguments (the key is opaque to clients).
"""

from __future__ import annotations

import contextlib
import json

from hutch_operator.core import brokerclient, errors, references
from hutch_operator.models import bindings, kinds
from hutch_operator.topology import reconciling, snapshots, translators
from hutch_operator.topology.handlers import registration

Spec = bindings.BindingSpec


async def declare(target: references.Target, spec: Spec, name: str, owned: bool) -> bool:
    try:
        await target.client.call(translators.binding_create(spec))
    except errors.ObjectNotFoundError as exc:
        missing = await _missing(target, spec)
        raise errors.DependencyNotFoundError(
            f"{' and '.join(missing) or 'source or destination'} not found in vhost {spec.vhost!r}"
        ) from exc
    return True


async def _missing(target: references.Target, spec: Spec) -> list[str]:
    """Which end of a refused binding is absent, so the user knows what to create (two GETs,
    only after a 404; a vhost that is gone makes both absent)."""
    destination = (
        translators.queue_path(spec.vhost, spec.destination)
        if spec.destination_type == "queue"
        else translators.exchange_path(spec.vhost, spec.destination)
    )
    ends = [
        (f"source exchange {spec.source!r}", translators.exchange_path(spec.vhost, spec.source)),
        (f"destination {spec.destination_type} {spec.destination!r}", destination),
    ]
    missing = []
    for label, path in ends:
        try:
            await target.client.call(brokerclient.Request("GET", path))
        except errors.ObjectNotFoundError:
            missing.append(label)
    return missing


async def delete(target: references.Target, spec: Spec, name: str) -> tuple[str, str] | None:
    collection = translators.binding_collection(spec)
    try:
        listed = await target.client.call(brokerclient.Request("GET", collection))
    except errors.ObjectNotFoundError:
        return None
    for item in listed or ():
        if translators.binding_matches(spec, item):
            with contextlib.suppress(errors.ObjectNotFoundError):
                await target.client.call(translators.binding_delete(spec, item["properties_key"]))
    return None


async def observe(target: references.Target, spec: Spec, name: str) -> reconciling.Observation:
    request = brokerclient.Request("GET", f"/api/bindings/{translators.segment(spec.vhost)}")
    listing = await snapshots.get(target.client, target.key, "binding", request)
    ends = listing.all(
        source=spec.source, destination=spec.destination, destination_type=spec.destination_type
    )
    found = any(translators.binding_matches(spec, item) for item in ends)
    return reconciling.Observation(missing=not found)


def identity(spec: Spec, name: str) -> tuple[str, ...]:
    arguments = json.dumps(dict(spec.arguments), sort_keys=True)
    return ("binding", spec.source, spec.destination_type, spec.destination, spec.routing_key,
            arguments)  # fmt: skip


OPS = reconciling.KindOps(
    kind=kinds.BINDING,
    identity=identity,
    declare=declare,
    delete=delete,
    observe=observe,
    label="binding",
)
registration.register(OPS)
