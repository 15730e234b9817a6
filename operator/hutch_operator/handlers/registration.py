"""Registers one topology kind's Kopf handlers from its ``KindOps``.

Every topology kind has the same handlers (conflict index; create/update/resume stacked on one
idempotent function; delete with the finalizer; the index of desired objects the drift sweep
walks), each one call into ``reconciling``/``sweeping``; writing them out nine times would only
multiply the places where they could drift apart. The per-kind modules keep what differs: their
KindOps. There is no per-object timer: one ``sweeping.Sweeper`` task, started at operator
start-up (``startup``), sweeps every kind's ``desired`` index.
"""

from __future__ import annotations

import time
from typing import Any

import kopf

from hutch_operator import reconciling, sweeping
from hutch_operator.models import common

BROKER_INDEX = "broker_facts"
VHOST_CLAIMS = "vhosts_claims"  # the Vhost kind's claims: who owns a vhost (reconciling)
REGISTRY: dict[str, reconciling.KindOps] = {}  # kind → ops (the Broker cleans orphans)
WAITING_INDEXES: list[str] = []  # one per kind: objects waiting for their Broker (design §5.6)
SWEPT: dict[str, tuple[reconciling.KindOps, str]] = {}  # desired index id → (ops, claims id)


def claims_index(ops: reconciling.KindOps) -> str:
    return f"{ops.kind.plural}_claims"


def desired_index(ops: reconciling.KindOps) -> str:
    return f"{ops.kind.plural}_desired"


def _context(ops: reconciling.KindOps, body: kopf.Body, patch: kopf.Patch, kwargs: Any) -> Any:
    return reconciling.Context(
        ops=ops,
        body=body,
        patch=patch,
        brokers=kwargs[BROKER_INDEX],
        claims=kwargs[claims_index(ops)],
        vhost_claims=kwargs.get(VHOST_CLAIMS, {}),
    )


def register(ops: reconciling.KindOps) -> None:
    resource = (common.GROUP, common.VERSION, ops.kind.plural)
    REGISTRY[ops.kind.kind] = ops

    # async: Kopf runs a sync function in a thread, a hop that cost more than the function.
    @kopf.index(*resource, id=claims_index(ops))
    async def claims(body: kopf.Body, **_: Any) -> Any:
        return reconciling.index_claim(ops, body)

    @kopf.index(*resource, id=f"{ops.kind.plural}_waiting")
    async def waiting(body: kopf.Body, **_: Any) -> Any:
        return reconciling.index_waiting(ops, body)

    WAITING_INDEXES.append(f"{ops.kind.plural}_waiting")

    @kopf.index(*resource, id=desired_index(ops))
    async def desired(body: kopf.Body, **_: Any) -> Any:
        sweeping.remember_posting()
        return sweeping.index_desired(body, now=time.monotonic())

    SWEPT[desired_index(ops)] = (ops, claims_index(ops))

    @kopf.on.resume(*resource, id="declare")
    @kopf.on.create(*resource, id="declare")
    @kopf.on.update(*resource, id="declare")
    async def declare(
        body: kopf.Body, patch: kopf.Patch, reason: str, retry: int, **kwargs: Any
    ) -> None:
        ctx = _context(ops, body, patch, kwargs)
        await reconciling.declare(ctx, cause=str(reason), retry=retry)

    @kopf.on.delete(*resource, id="delete")
    async def delete(
        body: kopf.Body, patch: kopf.Patch, runtime: Any, retry: int, **kwargs: Any
    ) -> None:
        ctx = _context(ops, body, patch, kwargs)
        await reconciling.delete(ctx, runtime=runtime.total_seconds(), retry=retry)
