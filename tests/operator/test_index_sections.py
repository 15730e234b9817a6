"""One Kopf index per topology kind, read as the three indexes it replaces.

Kopf runs every index function through its handler machinery on every watch event, so three
index functions per kind cost three times that per event (at 10,000 Queues a large share of the
operator's CPU). Pinned here: each kind registers one index function; its result fills Kopf's
real ``Index`` under three sections; ``registration.views`` reads them under the old ids
(``queues_claims``, ``queues_waiting``, ``queues_desired``) with the same keys and values the
three functions gave; an object's change or deletion leaves no stale entry in any section.
"""

from __future__ import annotations

from typing import Any

import kopf
from hutch_operator.topology import reconciling, sweeping
from hutch_operator.topology.handlers import queues, registration
from kopf._core.engines import indexing

NAMESPACE = "team"
ENDPOINT = "http://hutch.team.svc:15672"


def body(name: str, reason: str = "Declared", status: str = "True", **meta: Any) -> kopf.Body:
    raw = {
        "apiVersion": "hutch.dev/v1alpha1", "kind": "Queue",
        "metadata": {"namespace": NAMESPACE, "name": name, "uid": f"uid-{name}",
                     "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
                     "resourceVersion": "3", **meta},
        "spec": {"brokerRef": {"name": "hutch"}},
        "status": {"conditions": [{"type": "Ready", "status": status, "reason": reason}]},
    }  # fmt: skip
    return kopf.Body(raw)  # type: ignore[arg-type]


def test_each_topology_kind_registers_one_index_function() -> None:
    handlers = kopf.get_default_registry()._indexing.get_all_handlers()
    ids = sorted(str(handler.id) for handler in handlers)
    for ops in registration.REGISTRY.values():
        plural = ops.kind.plural
        assert [i for i in ids if i.startswith(f"{plural}_")] == [f"{plural}_index"], ids


def test_sections_read_as_the_three_indexes_did() -> None:
    indexer = indexing.OperatorIndexer()  # Kopf's own, as its watch events fill it
    waiting = body("waits", "BrokerNotReady", "False")
    settled = body("settled")
    for obj in (waiting, settled):
        indexer.replace((NAMESPACE, obj.metadata.name, obj.metadata.uid),
                        registration.index_object(queues.OPS, obj, now=1.0))  # fmt: skip
    index = indexer.index
    views = registration.views({registration.kind_index(queues.OPS): index, "other": {"k": 1}})
    claims = views[registration.claims_index(queues.OPS)]
    for obj in (waiting, settled):  # the claims index function's keys and values, unchanged
        [(key, claim)] = reconciling.index_claim(queues.OPS, obj).items()
        assert list(claims[key]) == [claim]
    assert sorted(claims) == sorted(
        key for obj in (waiting, settled) for key in reconciling.index_claim(queues.OPS, obj)
    )
    waits = views[registration.waiting_index(queues.OPS)]
    assert list(waits) == [(NAMESPACE, "hutch")]
    assert list(waits.get((NAMESPACE, "hutch"))) == [("queues", NAMESPACE, "waits")]
    desired = views[registration.desired_index(queues.OPS)]
    group = ("ref", NAMESPACE, "hutch")
    assert list(desired) == [group]
    entries = list(desired[group])
    assert sorted(e.raw["metadata"]["name"] for e in entries) == ["settled", "waits"]
    assert all(isinstance(e, sweeping.Desired) for e in entries)
    assert views["other"] == {"k": 1}  # indexes that are not sectioned pass through
    assert views.get("missing_claims", {}) == {}


def test_a_changed_or_deleted_object_leaves_no_stale_entry() -> None:
    indexer = indexing.OperatorIndexer()
    key = (NAMESPACE, "q", "uid-q")
    waiting = body("q", "BrokerNotReady", "False")
    indexer.replace(key, registration.index_object(queues.OPS, waiting, now=1.0))
    views = registration.views({registration.kind_index(queues.OPS): indexer.index})
    waits = views[registration.waiting_index(queues.OPS)]
    assert list(waits) == [(NAMESPACE, "hutch")]
    # Declared now: no longer waiting; still claimed and desired.
    indexer.replace(key, registration.index_object(queues.OPS, body("q"), now=2.0))
    assert list(waits) == []
    assert len(views[registration.claims_index(queues.OPS)]) == 1
    assert len(views[registration.desired_index(queues.OPS)]) == 1
    # Being deleted: the function gives nothing, so every section drops the object at once.
    deleting = body("q", deletionTimestamp="2026-01-02T00:00:00Z")
    indexer.replace(key, registration.index_object(queues.OPS, deleting, now=3.0))
    for view in (registration.claims_index, registration.waiting_index,
                 registration.desired_index):  # fmt: skip
        assert list(views[view(queues.OPS)]) == []
