"""A Broker Pod as the kubelet reports it: why it is not Ready, and whether to replace it.

Contract: docs/contracts/operator.md#broker-status.

Why: a StatefulSet with ``OrderedReady`` never replaces a Pod that never became Ready
(kubernetes/kubernetes#67250, "forced rollback"). A Broker whose Pod is OOM-killed at every
start keeps that Pod after its spec gets more memory: the template changes, the Pod does not.
The operator deletes such a Pod once (outdated revision, not Ready, not terminating) and the
StatefulSet recreates it at the new revision. A Ready Pod is never touched: rolling it is the
StatefulSet's job. The StatefulSet's readiness count alone hides the cause, so the container's
own record (waiting reason, last termination, restart count) becomes a warning.

Pure: Pod and StatefulSet JSON in, decisions out; ``brokerstatus`` does the reads and writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONTAINER = "hutch-broker"
REVISION_LABEL = "controller-revision-hash"
# Waiting reasons of a container that is being started for the first time, not in trouble.
STARTING = frozenset({"ContainerCreating", "PodInitializing"})


@dataclass(frozen=True)
class Trouble:
    """Why the broker container is not Ready, for the ``NoWarnings`` condition."""

    reason: str
    message: str
    restarts: int


def container_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The broker container's status (``{}`` before the kubelet reports one)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") == CONTAINER:
            return dict(status)
    return {}


def container_resources(pod: Mapping[str, Any]) -> dict[str, dict[str, int | str]]:
    """The broker container's resources as the Pod spec says (what its cgroup enforces)."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        if container.get("name") == CONTAINER:
            return dict(container.get("resources") or {})
    return {}


def is_ready(pod: Mapping[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def revision(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, ""))


def trouble(pod: Mapping[str, Any]) -> Trouble | None:
    """Why the broker container is not Ready, when the kubelet says so; None when it is Ready,
    or starting for the first time.

    The reason is the cause when it is known (``OOMKilled``, from the last termination), else
    the waiting reason (``CrashLoopBackOff``, ``ImagePullBackOff``...), else the last
    termination's; the message names all of them and the restart count.
    """
    status = container_status(pod)
    if not status or status.get("ready"):
        return None
    restarts = int(status.get("restartCount") or 0)
    waiting = str(((status.get("state") or {}).get("waiting") or {}).get("reason") or "")
    last = (status.get("lastState") or {}).get("terminated") or {}
    last_reason = str(last.get("reason") or "")
    if restarts == 0 and (not waiting or waiting in STARTING):
        return None
    reason = "OOMKilled" if last_reason == "OOMKilled" else waiting or last_reason
    reason = reason or "ContainerRestarting"
    name = (pod.get("metadata") or {}).get("name", "")
    parts = [f"Pod {name} container {CONTAINER} is not Ready"]
    if waiting:
        parts.append(f"waiting: {waiting}")
    parts.append(f"restarted {restarts} time{'' if restarts == 1 else 's'}")
    if last_reason:
        parts.append(f"last terminated: {last_reason} (exit code {last.get('exitCode')})")
    if last_reason == "OOMKilled":
        limit = (container_resources(pod).get("limits") or {}).get("memory")
        parts.append(f"its memory limit {limit} is too small" if limit else "no memory limit")
    return Trouble(reason, "; ".join(parts), restarts)


def replacement(
    statefulset: Mapping[str, Any], pod: Mapping[str, Any], replaced_for: str = ""
) -> str:
    """The StatefulSet's update revision when ``pod`` must be deleted to get it, else "".

    Only a Pod of an older revision that is not Ready and not already terminating, only once
    the StatefulSet controller has seen the current template (``observedGeneration``), and only
    once per revision (``replaced_for``: the revision a previous pass replaced a Pod for), so a
    Pod that fails at the new revision as well is reported, never deleted in a loop.
    """
    status = statefulset.get("status") or {}
    update = str(status.get("updateRevision") or "")
    generation = (statefulset.get("metadata") or {}).get("generation") or 0
    if not update or (status.get("observedGeneration") or 0) < generation:
        return ""
    current = revision(pod)
    if not current or update in (current, replaced_for):
        return ""
    if (pod.get("metadata") or {}).get("deletionTimestamp") or is_ready(pod):
        return ""
    return update


def settled(statefulset: Mapping[str, Any], replicas: int) -> bool:
    """Every replica Ready at the StatefulSet's current template: its Pods need no reading."""
    status = statefulset.get("status") or {}
    generation = (statefulset.get("metadata") or {}).get("generation") or 0
    return (
        (status.get("observedGeneration") or 0) >= generation
        and (status.get("readyReplicas") or 0) >= replicas
        and (status.get("updatedReplicas") or 0) >= replicas
        and bool(status.get("updateRevision"))
        and status.get("currentRevision") == status.get("updateRevision")
    )
