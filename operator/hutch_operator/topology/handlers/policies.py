"""Policy handlers: fully mutable, so drift of any field is corrected by a PUT."""

from __future__ import annotations

import contextlib
from typing import Any

from hutch_operator.core import brokerclient, errors, references
from hutch_operator.models import kinds
from hutch_operator.topology import reconciling, snapshots, translators
from hutch_operator.topology.handlers import registration


def policy_ops(kind: Any, *, operator: bool) -> reconciling.KindOps:
    """The KindOps of Policy (``operator=False``) or OperatorPolicy (``operator=True``)."""
    label = "operator policy" if operator else "policy"

    async def declare(target: references.Target, spec: Any, name: str, owned: bool) -> bool:
        await target.client.call(translators.policy_put(spec, name, operator=operator))
        return True

    async def delete(target: references.Target, spec: Any, name: str) -> tuple[str, str] | None:
        path = translators.policy_path(spec.vhost, name, operator=operator)
        with contextlib.suppress(errors.ObjectNotFoundError):
            await target.client.call(brokerclient.Request("DELETE", path))
        return None

    async def observe(target: references.Target, spec: Any, name: str) -> reconciling.Observation:
        path = translators.policy_path(spec.vhost, "", operator=operator).rstrip("/")
        listing = await snapshots.get(
            target.client, target.key, label, brokerclient.Request("GET", path)
        )
        listed = listing.first(name=name)
        if listed is None:
            return reconciling.Observation(missing=True)
        return reconciling.Observation(changed=translators.policy_differences(spec, listed))

    return reconciling.KindOps(
        kind=kind,
        identity=lambda spec, name: (label, name),
        declare=declare,
        delete=delete,
        observe=observe,
        label=label,
    )


OPS = policy_ops(kinds.POLICY, operator=False)
registration.register(OPS)
