"""The pause annotation (``kubectl hutch pause-reconciliation``) in every reconcile path.

A paused topology object is neither declared by its handlers nor judged by the sweep nor woken
for its Broker, and says so in ``ReconciliationPaused``; removing the annotation declares it
again at once (Kopf's update event), the condition turning False in the same status write as
Ready. A paused Broker's children are neither applied nor rolled. The real Queue ``KindOps``
runs against a fake broker client; the node test (tests/operator/test_kubectl_hutch_node.py)
shows the same against a real operator and broker.
"""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from hutch_operator.core import brokerclient, conditions, references
from hutch_operator.instances import brokers as instances
from hutch_operator.topology import reconciling, sweeping
from hutch_operator.topology.handlers import queues

NAMESPACE = "team-a"
PAUSED = {conditions.PAUSE_ANNOTATION: "true"}
BROKERS: references.BrokerIndex = {
    (NAMESPACE, "hutch"): [references.BrokerFacts(NAMESPACE, "hutch", True, False)]
}


class FakeBroker:
    base_url = "http://hutch.team-a.svc:15672"

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    async def call(self, request: brokerclient.Request) -> Any:
        self.requests.append((request.method, request.path))
        return brokerclient._outcome(request, 201, "", self.base_url)

    async def is_hutch(self) -> bool:
        return True


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    fake = FakeBroker()

    async def default_user(namespace: str, name: str) -> tuple[str, str]:
        return "user", "secret"

    monkeypatch.delenv("HUTCH_BROKER_ADDRESSES", raising=False)
    monkeypatch.setenv("HUTCH_QUEUE_STATS", "false")
    monkeypatch.setattr(references, "_default_user", default_user)
    monkeypatch.setattr(brokerclient.POOL, "get", lambda *args, **kwargs: fake)
    monkeypatch.setattr(kopf, "warn", lambda *args, **kwargs: None)
    monkeypatch.setattr(kopf, "info", lambda *args, **kwargs: None)
    return fake


def body(annotations: dict[str, str] | None = None, status: dict[str, Any] | None = None) -> Any:
    return {
        "apiVersion": "hutch.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {
            "name": "orders", "namespace": NAMESPACE, "uid": "uid-orders", "generation": 2,
            "creationTimestamp": "2024-01-01T00:00:00Z", "annotations": annotations or {},
        },
        "spec": {"brokerRef": {"name": "hutch"}},
        "status": status or {},
    }  # fmt: skip


def context(raw: Any) -> reconciling.Context:
    return reconciling.Context(queues.OPS, kopf.Body(raw), kopf.Patch(), BROKERS, {})


def condition(ctx: reconciling.Context, type_: str) -> dict[str, Any] | None:
    found = conditions.find(ctx.patch.status.get("conditions"), type_)
    return dict(found) if found else None


@pytest.mark.parametrize("cause", ["create", "update", "resume"])
async def test_a_paused_object_is_not_declared_and_says_so(broker: FakeBroker, cause: str) -> None:
    ctx = context(body(PAUSED))
    await reconciling.declare(ctx, cause=cause, retry=0)
    assert broker.requests == []
    paused = condition(ctx, conditions.PAUSED)
    assert paused is not None
    assert (paused["status"], paused["reason"]) == ("True", "PausedByAnnotation")
    assert condition(ctx, reconciling.READY) is None  # Ready keeps what it said


async def test_a_paused_object_already_saying_so_costs_no_write(broker: FakeBroker) -> None:
    first = context(body(PAUSED))
    await reconciling.declare(first, cause="update", retry=0)
    again = context(body(PAUSED, status=dict(first.patch.status)))
    await reconciling.declare(again, cause="resume", retry=0)
    assert broker.requests == []
    assert dict(again.patch) == {}


async def test_removing_the_annotation_declares_and_clears_the_condition(
    broker: FakeBroker,
) -> None:
    paused = context(body(PAUSED))
    await reconciling.declare(paused, cause="update", retry=0)
    resumed = context(body({}, status=dict(paused.patch.status)))
    await reconciling.declare(resumed, cause="update", retry=0)
    assert broker.requests == [("PUT", "/api/queues/%2F/orders")]
    ready = condition(resumed, reconciling.READY)
    assert ready is not None and (ready["status"], ready["reason"]) == ("True", "Declared")
    cleared = condition(resumed, conditions.PAUSED)
    assert cleared is not None and (cleared["status"], cleared["reason"]) == ("False", "Resumed")


def test_the_annotation_must_say_true() -> None:
    assert conditions.is_paused({"annotations": {conditions.PAUSE_ANNOTATION: "True"}})
    assert not conditions.is_paused({"annotations": {conditions.PAUSE_ANNOTATION: "false"}})
    assert not conditions.is_paused({})


def test_the_sweep_and_the_wake_ups_skip_a_paused_object() -> None:
    waiting = {"conditions": [{"type": "Ready", "status": "False", "reason": "BrokerNotReady"}]}
    assert sweeping.index_desired(kopf.Body(body(PAUSED)), now=1.0) == {}
    assert sweeping.index_desired(kopf.Body(body()), now=1.0) != {}
    assert reconciling.index_waiting(queues.OPS, kopf.Body(body(PAUSED, waiting))) == {}
    assert reconciling.index_waiting(queues.OPS, kopf.Body(body(None, waiting))) != {}


def broker_body(annotations: dict[str, str]) -> Any:
    return {
        "apiVersion": "hutch.dev/v1alpha1",
        "kind": "Broker",
        "metadata": {"name": "hutch", "namespace": NAMESPACE, "uid": "uid-b", "generation": 1,
                     "annotations": annotations},
        "spec": {},
        "status": {},
    }  # fmt: skip


async def test_a_paused_broker_applies_no_children(monkeypatch: pytest.MonkeyPatch) -> None:
    applied: list[str] = []

    async def apply_children(broker: Any) -> None:
        applied.append(broker.name)

    monkeypatch.setattr(instances, "apply_children", apply_children)
    patch = kopf.Patch()
    await instances.reconcile(kopf.Body(broker_body(PAUSED)), patch, retry=0)
    assert applied == []
    paused = conditions.find(patch.status["conditions"], conditions.PAUSED)
    assert paused is not None and paused["status"] == "True"
    assert conditions.find(patch.status["conditions"], "ReconcileSuccess") is None
