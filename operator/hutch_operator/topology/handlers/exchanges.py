"""Exchange handlers: declare, delete, and report (never fix) immutable drift."""

from __future__ import annotations

import contextlib

from hutch_operator.core import brokerclient, errors, references
from hutch_operator.models import exchanges, kinds
from hutch_operator.topology import reconciling, snapshots, translators
from hutch_operator.topology.handlers import registration

Spec = exchanges.ExchangeSpec


async def declare(target: references.Target, spec: Spec, name: str, owned: bool) -> bool:
    await target.client.call(translators.exchange_declare(spec, name))
    return True


async def delete(target: references.Target, spec: Spec, name: str) -> tuple[str, str] | None:
    with contextlib.suppress(errors.ObjectNotFoundError):
        await target.client.call(
            brokerclient.Request("DELETE", translators.exchange_path(spec.vhost, name))
        )
    return None


async def observe(target: references.Target, spec: Spec, name: str) -> reconciling.Observation:
    request = brokerclient.Request("GET", f"/api/exchanges/{translators.segment(spec.vhost)}")
    listing = await snapshots.get(target.client, target.key, "exchange", request)
    listed = listing.first(name=name)
    if listed is None:
        return reconciling.Observation(missing=True)
    return reconciling.Observation(mismatched=translators.exchange_differences(spec, listed))


OPS = reconciling.KindOps(
    kind=kinds.EXCHANGE,
    identity=lambda spec, name: ("exchange", name),
    declare=declare,
    delete=delete,
    observe=observe,
    label="exchange",
)
registration.register(OPS)
