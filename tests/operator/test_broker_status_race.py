"""The Broker timer's status write does not undo a write it did not see (a real kube-apiserver).

``conditions`` is one list, written whole. The ``refresh`` timer runs beside the ``apply``
handler: a tick that read the Broker, then spent seconds observing the Pod and the broker,
used to write its whole conditions list back, so an ``apply`` that had meanwhile written
``ReconcileSuccess=False`` (a refused volume shrink) was undone, and nothing reconciled again
until the spec changed (a flake of test_hutch_topology, docs/testing.md). The timer's write now
carries the resourceVersion it read: after any other write the apiserver refuses it (409) and
the next tick observes again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kopf
import pytest
from hutch_operator.core import kube
from hutch_operator.instances import brokerstatus
from hutch_operator.models import common

REPO = Path(__file__).resolve().parents[2]
SPEC = {"resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "256Mi"}}}


@pytest.fixture(scope="module")
def plane(apiserver: Any) -> Any:
    apiserver.apply_crds(REPO / "crds")
    return apiserver


@pytest.fixture
async def broker_path(plane: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("KUBECONFIG", str(plane.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ns = plane.create_namespace()
    path = kube.object_path(common.API_VERSION, "brokers", ns, "b")
    body = {"apiVersion": common.API_VERSION, "kind": "Broker", "metadata": {"name": "b"},
            "spec": SPEC}  # fmt: skip
    status, reply = plane.api("POST", kube.object_path(common.API_VERSION, "brokers", ns), body)
    assert status == 201, reply
    yield path
    await kube.close()
    plane.delete_namespace(ns)


def _condition(body: dict[str, Any], type_: str) -> dict[str, Any] | None:
    found = [c for c in body.get("status", {}).get("conditions", []) if c["type"] == type_]
    return found[0] if found else None


async def _apply_handler_refuses(plane: Any, path: str) -> None:
    """What ``apply`` writes when it fails permanently (through Kopf, a merge patch)."""
    _, current = plane.api("GET", path)
    report = brokerstatus.Report(kopf.Body(current))
    report.condition("ReconcileSuccess", False, "UnsupportedOperation", "volumes cannot shrink")
    await kube.api().merge_patch(f"{path}/status", {"status": report.changes()})


async def test_a_tick_that_read_before_another_write_leaves_it_in_place(
    plane: Any, broker_path: str
) -> None:
    _, before = plane.api("GET", broker_path)
    tick = brokerstatus.Report(kopf.Body(before))  # the timer reads the Broker ...
    tick.condition("ReconcileSuccess", True, "Applied", "children applied")  # as it last was
    tick.condition("Ready", False, "PodNotReady", "the Pod is rolling")

    await _apply_handler_refuses(plane, broker_path)  # ... apply fails meanwhile ...

    assert await tick.write_if_unchanged(broker_path) is None  # ... the tick's write is refused
    _, after = plane.api("GET", broker_path)
    kept = _condition(after, "ReconcileSuccess")
    assert kept is not None and (kept["status"], kept["reason"]) == (
        "False",
        "UnsupportedOperation",
    )
    assert _condition(after, "Ready") is None

    # The next tick reads the new state and writes its own condition beside apply's.
    tick = brokerstatus.Report(kopf.Body(after))
    tick.condition("Ready", False, "PodNotReady", "the Pod is rolling")
    written = await tick.write_if_unchanged(broker_path)
    assert written is not None and "conditions" in written
    _, latest = plane.api("GET", broker_path)
    assert _condition(latest, "ReconcileSuccess")["reason"] == "UnsupportedOperation"  # type: ignore[index]
    assert _condition(latest, "Ready")["reason"] == "PodNotReady"  # type: ignore[index]


async def test_a_tick_with_nothing_to_change_writes_nothing(plane: Any, broker_path: str) -> None:
    await _apply_handler_refuses(plane, broker_path)
    _, before = plane.api("GET", broker_path)
    tick = brokerstatus.Report(kopf.Body(before))
    assert await tick.write_if_unchanged(broker_path) == {}
    _, after = plane.api("GET", broker_path)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
