"""A crash-looping Broker Pod: the replace decision, the warning, and status.memory (no cluster).

The Pod and StatefulSet bodies are shaped as a 1.3x apiserver returns them for a Broker whose
40Mi Pod is OOM-killed at every start after its spec went to 256Mi (issue 31, item 1); the node
test (test_broker_crashloop_node.py) runs the same story on the kubelet.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest
from hutch_operator.instances import brokerstatus, memory, podstate

OLD, NEW = "bulk-server-6d5f8b7c9", "bulk-server-7f9c4d6b8"


def crashlooping_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "bulk-server-0",
            "namespace": "ns",
            "uid": "0b6f1c1e-5a55-4c1a-9d8c-3c1c2d1b0a01",
            "labels": {
                "app.kubernetes.io/name": "hutch-broker",
                "app.kubernetes.io/instance": "bulk",
                "controller-revision-hash": OLD,
                "statefulset.kubernetes.io/pod-name": "bulk-server-0",
            },
            "ownerReferences": [{"kind": "StatefulSet", "name": "bulk-server", "controller": True}],
        },
        "spec": {
            "containers": [
                {
                    "name": "hutch-broker",
                    "image": "localhost/hutch/hutch-broker:0.1.0",
                    "resources": {
                        "limits": {"memory": "40Mi"},
                        "requests": {"cpu": "100m", "memory": "40Mi"},
                    },
                }
            ]
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": "hutch-broker",
                    "ready": False,
                    "started": False,
                    "restartCount": 4,
                    "image": "localhost/hutch/hutch-broker:0.1.0",
                    "containerID": "containerd://5f0c",
                    "state": {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": "back-off 1m20s restarting failed container=hutch-broker "
                            "pod=bulk-server-0_ns(0b6f1c1e-5a55-4c1a-9d8c-3c1c2d1b0a01)",
                        }
                    },
                    "lastState": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "OOMKilled",
                            "startedAt": "2026-11-28T07:40:01Z",
                            "finishedAt": "2026-11-28T07:40:02Z",
                            "containerID": "containerd://5f0c",
                        }
                    },
                }
            ],
        },
    }


def ready_pod(revision: str = NEW) -> dict[str, Any]:
    pod = crashlooping_pod()
    pod["metadata"]["labels"]["controller-revision-hash"] = revision
    pod["spec"]["containers"][0]["resources"] = {
        "limits": {"memory": "256Mi"},
        "requests": {"cpu": "100m", "memory": "256Mi"},
    }
    pod["status"]["conditions"][1] = {"type": "Ready", "status": "True"}
    pod["status"]["containerStatuses"][0].update(
        ready=True, started=True, restartCount=0, state={"running": {}}, lastState={}
    )
    return pod


def statefulset(*, update: str = NEW, generation: int = 2, observed: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "bulk-server", "namespace": "ns", "generation": generation},
        "spec": {"replicas": 1, "podManagementPolicy": "OrderedReady"},
        "status": {
            "observedGeneration": observed,
            "replicas": 1,
            "readyReplicas": 0,
            "currentReplicas": 1,
            "updatedReplicas": 0,
            "currentRevision": OLD,
            "updateRevision": update,
            "collisionCount": 0,
            "availableReplicas": 0,
        },
    }


# -- the replace decision ---------------------------------------------------------------------


def test_an_outdated_pod_that_is_not_ready_is_replaced_for_the_update_revision() -> None:
    assert podstate.replacement(statefulset(), crashlooping_pod()) == NEW


def test_a_ready_pod_is_never_replaced_even_when_outdated() -> None:
    assert podstate.replacement(statefulset(), ready_pod(OLD)) == ""


def test_a_pod_at_the_update_revision_is_not_replaced_even_when_crash_looping() -> None:
    pod = crashlooping_pod()
    pod["metadata"]["labels"]["controller-revision-hash"] = NEW
    assert podstate.replacement(statefulset(), pod) == ""


def test_a_terminating_pod_is_left_to_terminate() -> None:
    pod = crashlooping_pod()
    pod["metadata"]["deletionTimestamp"] = "2026-11-28T07:41:00Z"
    assert podstate.replacement(statefulset(), pod) == ""


def test_only_once_per_revision() -> None:
    assert podstate.replacement(statefulset(), crashlooping_pod(), replaced_for=NEW) == ""
    # a later revision (the spec changed again) may replace it once more
    later = statefulset(update="bulk-server-88aa11")
    assert podstate.replacement(later, crashlooping_pod(), replaced_for=NEW) == "bulk-server-88aa11"


def test_not_before_the_statefulset_controller_saw_the_new_template() -> None:
    assert podstate.replacement(statefulset(update=OLD, generation=3, observed=2),
                                crashlooping_pod()) == ""  # fmt: skip
    assert podstate.replacement(statefulset(generation=3, observed=2), crashlooping_pod()) == ""


def test_no_revision_to_compare_no_replacement() -> None:
    pod = crashlooping_pod()
    del pod["metadata"]["labels"]["controller-revision-hash"]
    assert podstate.replacement(statefulset(), pod) == ""
    sts = statefulset()
    del sts["status"]["updateRevision"]
    assert podstate.replacement(sts, crashlooping_pod()) == ""


def test_settled_needs_every_replica_ready_at_the_update_revision() -> None:
    sts = statefulset()
    assert not podstate.settled(sts, 1)
    sts["status"].update(readyReplicas=1, updatedReplicas=1, currentRevision=NEW)
    assert podstate.settled(sts, 1)
    assert not podstate.settled({**sts, "metadata": {**sts["metadata"], "generation": 3}}, 1)


# -- the warning ------------------------------------------------------------------------------


def test_an_oom_killed_crash_loop_names_the_cause_the_back_off_and_the_restart_count() -> None:
    trouble = podstate.trouble(crashlooping_pod())
    assert trouble is not None
    assert trouble.reason == "OOMKilled"
    assert trouble.restarts == 4
    assert "CrashLoopBackOff" in trouble.message
    assert "restarted 4 times" in trouble.message
    assert "OOMKilled (exit code 137)" in trouble.message
    assert "40Mi" in trouble.message


def test_a_crash_loop_without_oom_is_named_by_its_back_off() -> None:
    pod = crashlooping_pod()
    pod["status"]["containerStatuses"][0]["lastState"]["terminated"].update(
        reason="Error", exitCode=2
    )
    trouble = podstate.trouble(pod)
    assert trouble is not None and trouble.reason == "CrashLoopBackOff"
    assert "last terminated: Error (exit code 2)" in trouble.message


def test_between_back_offs_the_running_container_still_reports_the_oom_kill() -> None:
    pod = crashlooping_pod()
    pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-11-28T07:41Z"}}
    trouble = podstate.trouble(pod)
    assert trouble is not None and trouble.reason == "OOMKilled"


@pytest.mark.parametrize("waiting", ["ContainerCreating", "PodInitializing", None])
def test_a_first_start_is_no_trouble(waiting: str | None) -> None:
    pod = crashlooping_pod()
    status = pod["status"]["containerStatuses"][0]
    status.update(restartCount=0, lastState={})
    status["state"] = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    assert podstate.trouble(pod) is None


def test_an_image_that_cannot_be_pulled_is_trouble_before_any_restart() -> None:
    pod = crashlooping_pod()
    status = pod["status"]["containerStatuses"][0]
    status.update(restartCount=0, lastState={}, state={"waiting": {"reason": "ImagePullBackOff"}})
    trouble = podstate.trouble(pod)
    assert trouble is not None and trouble.reason == "ImagePullBackOff"


def test_a_ready_container_or_no_status_yet_is_no_trouble() -> None:
    assert podstate.trouble(ready_pod()) is None
    pending = crashlooping_pod()
    del pending["status"]["containerStatuses"]
    assert podstate.trouble(pending) is None


# -- status.memory ----------------------------------------------------------------------------


def report() -> brokerstatus.Report:
    body = SimpleNamespace(status={}, metadata={"generation": 2})
    return brokerstatus.Report(body)  # type: ignore[arg-type]


def spec_plan() -> memory.WatermarkPlan:
    resources = {"requests": {"memory": "256Mi"}, "limits": {"memory": "256Mi"}}
    return memory.watermark(resources, 0.4)


def test_status_memory_is_the_running_pods_with_the_spec_plan_pending() -> None:
    pod = crashlooping_pod()
    r = report()
    r._memory(spec_plan(), podstate.container_resources(pod), {})
    assert r.status["memory"] == {
        "basis": "Request",
        "relative": "0.4",
        "basisBytes": 40 * 2**20,
        "highWatermarkBytes": 16777216,  # floor(0.4 x 40Mi), what the 40Mi Pod runs with
        "pending": {
            "basis": "Request",
            "relative": "0.4",
            "basisBytes": 256 * 2**20,
            "highWatermarkBytes": 107374182,
        },
    }


def test_status_memory_has_no_pending_once_the_pod_runs_the_spec() -> None:
    r = report()
    r._memory(spec_plan(), podstate.container_resources(ready_pod()), {})
    assert r.status["memory"] == spec_plan().status()
    # canonical quantities from the apiserver ("0.25Gi" comes back as "256Mi") compare by bytes
    quarter = {"requests": {"memory": "0.25Gi"}, "limits": {"memory": "268435456"}}
    r._memory(spec_plan(), copy.deepcopy(quarter), {})
    assert "pending" not in r.status["memory"]


def test_status_memory_before_any_pod_is_the_spec_plan() -> None:
    r = report()
    r._memory(spec_plan(), None, {})
    assert r.status["memory"] == spec_plan().status()


# -- the status pass: one delete per revision, an Event, the uid precondition ------------------


class FakeKube:
    """The two reads and the delete the status pass makes, answered from dicts."""

    def __init__(self, sts: dict[str, Any], pod: dict[str, Any]) -> None:
        self.objects = {"statefulsets/bulk-server": sts, "pods/bulk-server-0": pod}
        self.deletes: list[tuple[str, Any]] = []

    async def get(self, path: str) -> dict[str, Any] | None:
        return self.objects.get("/".join(path.split("/")[-2:]))

    async def delete(self, path: str, body: Any = None) -> None:
        self.deletes.append((path, body))


def broker_object() -> Any:
    from hutch_operator.instances.children import meta
    from hutch_operator.models import brokers

    spec = brokers.BrokerSpec.model_validate({"resources": {
        "requests": {"memory": "256Mi"}, "limits": {"memory": "256Mi"}}})  # fmt: skip
    return meta.BrokerObject(name="bulk", namespace="ns", uid="u", spec=spec, image="i")


def run_pass(monkeypatch: pytest.MonkeyPatch, fake: FakeKube, status: dict[str, Any]) -> Any:
    import asyncio

    import kopf
    from hutch_operator.core import kube

    events: list[tuple[str, str, str]] = []
    monkeypatch.setattr(kube, "api", lambda: fake)
    monkeypatch.setattr(kopf, "info", lambda _b, reason, message: events.append(("Normal", reason, message)))  # fmt: skip
    monkeypatch.setattr(kopf, "warn", lambda _b, reason, message: events.append(("Warning", reason, message)))  # fmt: skip
    body = SimpleNamespace(status=status, metadata={"generation": 2})
    r = brokerstatus.Report(body)  # type: ignore[arg-type]
    running, pods = asyncio.run(r._pods(broker_object()))
    r._memory(spec_plan(), running, {})
    return r, pods, events


def test_the_status_pass_deletes_the_stuck_pod_once_with_an_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeKube(statefulset(), crashlooping_pod())
    r, _pods, events = run_pass(monkeypatch, fake, {})
    assert fake.deletes == [(
        "/api/v1/namespaces/ns/pods/bulk-server-0",
        {"preconditions": {"uid": "0b6f1c1e-5a55-4c1a-9d8c-3c1c2d1b0a01"}},
    )]  # fmt: skip
    ((kind, reason, message),) = events
    assert (kind, reason) == ("Normal", "PodReplaced")
    assert OLD in message and NEW in message and "OOMKilled" in message
    assert r.status["podReplaced"]["revision"] == NEW
    assert r.status["memory"]["pending"] == spec_plan().status()
    # The next pass, with that status stored, sees the same Pod (the delete not yet done, or a
    # new Pod failing at the old revision): no second delete.
    again = FakeKube(statefulset(), crashlooping_pod())
    _r, _pods, events = run_pass(monkeypatch, again, dict(r.status))
    assert again.deletes == [] and events == []


def test_the_status_pass_reads_no_pod_once_the_statefulset_is_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sts = statefulset()
    sts["status"].update(readyReplicas=1, updatedReplicas=1, currentRevision=NEW)
    sts["spec"]["template"] = {"spec": ready_pod()["spec"]}
    fake = FakeKube(sts, crashlooping_pod())  # a Pod that would be deleted, were it read
    r, pods, events = run_pass(monkeypatch, fake, {})
    assert (pods, fake.deletes, events) == ([], [], [])
    assert r.status["memory"] == spec_plan().status()


def test_pending_is_dropped_from_the_stored_status_once_the_pod_runs_the_spec() -> None:
    """Status is written as a merge patch: a nested key that is merely absent would stay."""
    stored = {"memory": {**spec_plan().status(), "pending": spec_plan().status()}}
    body = SimpleNamespace(status=stored, metadata={"generation": 2})
    r = brokerstatus.Report(body)  # type: ignore[arg-type]
    r._memory(spec_plan(), podstate.container_resources(ready_pod()), {})
    patch = SimpleNamespace(status={})
    r.flush(patch)  # type: ignore[arg-type]
    assert patch.status["memory"] == {**spec_plan().status(), "pending": None}
    # once stored without it, a pass writes nothing
    settled = SimpleNamespace(status={"memory": spec_plan().status()}, metadata={"generation": 2})
    again = brokerstatus.Report(settled)  # type: ignore[arg-type]
    again._memory(spec_plan(), podstate.container_resources(ready_pod()), {})
    quiet = SimpleNamespace(status={})
    again.flush(quiet)  # type: ignore[arg-type]
    assert "memory" not in quiet.status
