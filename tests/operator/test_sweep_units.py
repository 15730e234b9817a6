"""Pure parts of recovery: the waiting-for-Broker index, the abandoned list, the wake rule.

The sweep's own pure parts (freshness, the bulk diff) are in test_bulk_sweep.py."""

from __future__ import annotations

from typing import Any

import kopf
from hutch_operator.topology import reconciling
from hutch_operator.topology.handlers import queues


def _body(reason: str, status: str = "False", **spec: Any) -> kopf.Body:
    raw = {
        "metadata": {"namespace": "team", "name": "orders"},
        "spec": spec or {"brokerRef": {"name": "hutch"}},
        "status": {"conditions": [{"type": "Ready", "status": status, "reason": reason}]},
    }
    return kopf.Body(raw)  # type: ignore[arg-type]


def test_objects_waiting_for_their_broker_are_indexed_by_broker() -> None:
    """Defect 8: the Broker's status timer finds what to wake by (namespace, name)."""
    expected = {("team", "hutch"): ("queues", "team", "orders")}
    assert reconciling.index_waiting(queues.OPS, _body("BrokerNotReady")) == expected
    assert reconciling.index_waiting(queues.OPS, _body("BrokerUnavailable")) == expected
    other = _body("BrokerNotReady", brokerRef={"name": "hutch", "namespace": "infra"})
    assert reconciling.index_waiting(queues.OPS, other) == {
        ("infra", "hutch"): ("queues", "team", "orders")
    }


def test_other_objects_do_not_wait() -> None:
    assert reconciling.index_waiting(queues.OPS, _body("Declared", "True")) == {}
    assert reconciling.index_waiting(queues.OPS, _body("BrokerRejected")) == {}
    secret = _body("BrokerUnavailable", connectionSecret={"name": "s"})
    assert reconciling.index_waiting(queues.OPS, secret) == {}


def test_abandoned_list_adds_replaces_and_drops_by_cr() -> None:
    """Defect 7: one entry per deleted CR; a cleaned one leaves, concurrent ones stay."""
    from hutch_operator.topology import abandoned

    first = abandoned.entry("Queue", "team", "orders", {"brokerRef": {"name": "b"}}, "/", "o")
    again = abandoned.entry("Queue", "team", "orders", {"brokerRef": {"name": "b"}}, "/", "o2")
    other = abandoned.entry("Policy", "team", "lazy", {}, "/", "lazy")
    assert abandoned.merged([first], [other], set()) == [first, other]
    assert abandoned.merged([first, other], [again], set()) == [other, again]
    assert abandoned.merged([first, other], [], {("Queue", "team", "orders")}) == [other]


def _available(status: str) -> list[dict[str, str]]:
    return [{"type": "Available", "status": status, "reason": "AlivenessOk"}]


def test_a_broker_wakes_its_waiting_objects_only_when_stored_and_observed_available() -> None:
    """Defect 8's wake-up: the stored Available lets the woken objects resolve; this pass's own
    observation keeps a stale True from nudging objects at a broker that has just died (their
    BrokerUnavailable would make Kopf back off past the broker's return)."""
    assert reconciling.wakes(_available("True"), _available("True"))
    assert not reconciling.wakes(_available("True"), _available("False"))  # just died
    assert not reconciling.wakes(_available("False"), _available("True"))  # index not there yet
    assert not reconciling.wakes(None, None)
