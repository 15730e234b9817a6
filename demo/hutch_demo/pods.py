"""Pods as the kubelet reports them: readiness, node, container IDs, logs.

Why: the chain's claim is that the operator and the brokers run in real containers, so what it
waits on and what it prints come from the Pod status the kubelet writes (``nodeName``,
``containerStatuses[].containerID`` such as ``containerd://<64 hex>``), never from what the
harness assumes. A kwok Node writes no container ID, so a fake Pod cannot pass for a real one
here.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hutch_demo import clusters


def list_pods(
    cluster: clusters.Cluster, namespace: str, selector: str = ""
) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{namespace}/pods"
    if selector:
        path += "?labelSelector=" + urllib.parse.quote(selector)
    return list((cluster.get(path) or {}).get("items", []))


def get_pod(cluster: clusters.Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    return cluster.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


def is_ready(pod: dict[str, Any] | None) -> bool:
    conditions = (pod or {}).get("status", {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_ready(
    cluster: clusters.Cluster,
    namespace: str,
    name: str,
    *,
    timeout: float,
    not_uid: str | None = None,
) -> dict[str, Any]:
    """Waits for Pod ``name`` Ready (and, after a roll, for a Pod other than ``not_uid``)."""

    def probe() -> dict[str, Any] | None:
        pod = get_pod(cluster, namespace, name)
        if (
            pod is None
            or pod["metadata"]["uid"] == not_uid
            or pod["metadata"].get("deletionTimestamp")
        ):
            return None
        return pod if is_ready(pod) else None

    try:
        found: dict[str, Any] = clusters.wait_for(
            probe, f"Pod {namespace}/{name} Ready", timeout=timeout, interval=0.5
        )
    except clusters.ClusterError as exc:
        pod = get_pod(cluster, namespace, name)
        raise clusters.ClusterError(f"{exc}\nits status: {(pod or {}).get('status')}") from exc
    return found


@dataclass(frozen=True)
class PodFacts:
    """One Pod as the summary prints it."""

    name: str
    node: str
    containers: tuple[tuple[str, str], ...]  # (container name, runtime container ID)

    def line(self) -> str:
        ids = ", ".join(f"{c} {cid or '(none)'}" for c, cid in self.containers)
        return f"{self.name} on {self.node or '(unscheduled)'}: {ids}"


def facts(pod: dict[str, Any]) -> PodFacts:
    statuses = pod.get("status", {}).get("containerStatuses") or ()
    return PodFacts(
        name=pod["metadata"]["name"],
        node=pod.get("spec", {}).get("nodeName", ""),
        containers=tuple((s["name"], s.get("containerID", "")) for s in statuses),
    )


def save_logs(cluster: clusters.Cluster, namespace: str, target: Path) -> None:
    """``kubectl logs`` (and the previous container's, after a restart) of every Pod."""
    target.mkdir(parents=True, exist_ok=True)
    for pod in list_pods(cluster, namespace):
        name = pod["metadata"]["name"]
        for previous, suffix in ((False, ""), (True, ".previous")):
            args = ["logs", "-n", namespace, name, "--all-containers", "--timestamps"]
            result = cluster.kubectl(*args, *(["--previous"] if previous else []), check=False)
            if result.returncode == 0 and result.stdout:
                (target / f"pod-{name}{suffix}.log").write_text(result.stdout)
