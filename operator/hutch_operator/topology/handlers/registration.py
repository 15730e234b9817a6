"""Registers one topology kind's Kopf handlers from its ``KindOps``.

Every topology kind has the same handlers (one index; create/update/resume stacked on one
idempotent function; delete with the finalizer), each one call into ``reconciling``/
``sweeping``; writing them out nine times would only multiply the places where they could drift
apart. The per-kind modules keep what differs: their KindOps. There is no per-object timer: one
``sweeping.Sweeper`` task, started at operator start-up (``startup``), sweeps every kind's
``desired`` section.

One Kopf index per kind, in three sections: the conflict claims, the objects waiting for their
Broker, and the desired objects the sweep walks. They were three indexes, and Kopf runs each
index function through its whole handler machinery (kwargs, outcome, state) on every watch
event: at 10,000 Queues that was a large part of the operator's CPU while the apiserver, on the
same two cores, was the bottleneck. A section's key is ``(section, key)`` in the one index, and
``views`` shows each section under its old index id, so readers see three indexes as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import kopf

from hutch_operator.models import common
from hutch_operator.topology import reconciling, sweeping

BROKER_INDEX = "broker_facts"
VHOST_CLAIMS = "vhosts_claims"  # the Vhost kind's claims: who owns a vhost (reconciling)
REGISTRY: dict[str, reconciling.KindOps] = {}  # kind → ops (the Broker cleans orphans)
WAITING_INDEXES: list[str] = []  # one per kind: objects waiting for their Broker
SWEPT: dict[str, tuple[reconciling.KindOps, str]] = {}  # desired index id → (ops, claims id)
CLAIM, WAITING, DESIRED = "claim", "waiting", "desired"  # the sections of a kind's index
SECTIONS: dict[str, tuple[str, str]] = {}  # section id → (Kopf index id, section)


def kind_index(ops: reconciling.KindOps) -> str:
    return f"{ops.kind.plural}_index"


def claims_index(ops: reconciling.KindOps) -> str:
    return f"{ops.kind.plural}_claims"


def waiting_index(ops: reconciling.KindOps) -> str:
    return f"{ops.kind.plural}_waiting"


def desired_index(ops: reconciling.KindOps) -> str:
    return f"{ops.kind.plural}_desired"


class Section(Mapping[Any, Any]):
    """One section of a kind's Kopf index, read as an index of its own."""

    def __init__(self, index: Mapping[Any, Any], section: str) -> None:
        self.index = index
        self.section = section

    def __getitem__(self, key: Any) -> Any:
        return self.index[(self.section, key)]

    def get(self, key: Any, default: Any = None) -> Any:
        return self.index.get((self.section, key), default)

    def __contains__(self, key: object) -> bool:
        return (self.section, key) in self.index

    def __iter__(self) -> Iterator[Any]:
        return (key[1] for key in list(self.index) if key[0] == self.section)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:  # cheap: an empty section of a full index only iterates empty
        return bool(self.index)


class Views(Mapping[str, Any]):
    """Kopf's indexes (the kwargs of a handler) with each kind's sections under their own ids
    (``queues_claims``, ``queues_waiting``, ``queues_desired``)."""

    def __init__(self, indices: Mapping[str, Any]) -> None:
        self.indices = indices

    def __getitem__(self, index_id: str) -> Any:
        found = SECTIONS.get(index_id)
        if found is None:
            return self.indices[index_id]
        return Section(self.indices[found[0]], found[1])

    def __iter__(self) -> Iterator[str]:
        yield from (key for key in self.indices if key not in SECTIONED)
        yield from (key for key, (index, _) in SECTIONS.items() if index in self.indices)

    def __len__(self) -> int:
        return sum(1 for _ in self)


SECTIONED: set[str] = set()  # the Kopf index ids split into sections


def views(indices: Mapping[str, Any]) -> Views:
    return Views(indices)


def index_object(ops: reconciling.KindOps, body: kopf.Body, *, now: float) -> dict[Any, Any]:
    """The kind's one index function: the object's claim, its wait for a Broker and its desired
    state, each under its section."""
    found: dict[Any, Any] = {}
    for section, entries in (
        (CLAIM, reconciling.index_claim(ops, body)),
        (WAITING, reconciling.index_waiting(ops, body)),
        (DESIRED, sweeping.index_desired(body, now=now)),
    ):
        for key, value in entries.items():
            found[(section, key)] = value
    return found


def _context(ops: reconciling.KindOps, body: kopf.Body, patch: kopf.Patch, kwargs: Any) -> Any:
    indices = views(kwargs)
    return reconciling.Context(
        ops=ops,
        body=body,
        patch=patch,
        brokers=kwargs[BROKER_INDEX],
        claims=indices[claims_index(ops)],
        vhost_claims=indices.get(VHOST_CLAIMS, {}),
    )


def register(ops: reconciling.KindOps) -> None:
    resource = (common.GROUP, common.VERSION, ops.kind.plural)
    REGISTRY[ops.kind.kind] = ops

    # async: Kopf runs a sync function in a thread, a hop that cost more than the function.
    @kopf.index(*resource, id=kind_index(ops))
    async def index(body: kopf.Body, **_: Any) -> Any:
        sweeping.remember_posting()
        return index_object(ops, body, now=time.monotonic())

    SECTIONED.add(kind_index(ops))
    SECTIONS[claims_index(ops)] = (kind_index(ops), CLAIM)
    SECTIONS[waiting_index(ops)] = (kind_index(ops), WAITING)
    SECTIONS[desired_index(ops)] = (kind_index(ops), DESIRED)
    WAITING_INDEXES.append(waiting_index(ops))
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
