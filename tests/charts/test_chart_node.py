"""charts/hutch-operator installed with Helm on the real node: the operator runs as a real Pod.

Why: ``helm template`` and the apiserver-only tests prove the chart renders and its RBAC is
accepted; they cannot show that the image starts under the chart's security context, that the
ServiceAccount's Role is enough for Kopf, or that the metrics Service answers. Here the chart
runs the operator image built from docker/operator.Dockerfile in containerd on ``hutch-node``
(docs/real-node.md), and the operator creates examples/broker.yaml's children, whose broker Pod
runs too. Every check reads what only a kubelet and a container runtime produce: the runtime's
container ID, ``kubectl exec`` into the container, the local PV mounted for the PVC.
"""

from __future__ import annotations

import collections
import logging
import re
import secrets
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hutch_demo import chain, clusters, localnode, pods, releases

pytestmark = pytest.mark.timeout(600)

REPO = clusters.REPO_ROOT
log = logging.getLogger(__name__)


def exec_in(cluster: clusters.Cluster, namespace: str, pod: str, *command: str) -> Any:
    return cluster.kubectl("exec", "-n", namespace, pod, "--", *command, check=False)


def _remove(cluster: clusters.Cluster, namespace: str, operator: releases.OperatorRelease) -> None:
    """The order that strands nothing (charts/hutch-operator/README.md): the Hutch objects
    while the operator runs, then the release. A release left behind keeps its cluster-wide
    objects (the next install in this session is refused) and its operator Pod, which would
    reconcile the later node tests' Brokers too."""
    cluster.kubectl("delete", "hutch", "--all", "-n", namespace, "--wait", "--timeout=120s")
    operator.uninstall()
    clusters.wait_for(
        lambda: not pods.list_pods(cluster, namespace, operator.selector),
        "the operator Pod gone after helm uninstall",
        timeout=120,
    )


def test_helm_install_runs_the_operator_as_a_real_pod_that_reconciles_a_broker(
    node: Any, make_local_pvs: Any, k8s_namespace: str, tmp_path: Path
) -> None:
    cluster = clusters.local_cluster(node)
    node.apply_crds(REPO / "crds")
    localnode.provide_volumes(cluster, ["2Gi"])

    operator = releases.install(cluster, k8s_namespace, tmp_path)  # waits for /healthz
    try:
        _check_operator_and_broker(node, cluster, k8s_namespace, operator)
    finally:
        _remove(cluster, k8s_namespace, operator)


def _check_operator_and_broker(
    node: Any, cluster: clusters.Cluster, k8s_namespace: str, operator: Any
) -> None:
    pod = operator.pod()
    assert pod is not None
    facts = pods.facts(pod)
    assert facts.node == "hutch-node"
    ((_, container_id),) = facts.containers
    assert container_id.startswith("containerd://")
    assert pod["spec"]["containers"][0]["image"] == releases.OPERATOR_IMAGE
    assert pod["spec"]["serviceAccountName"] == releases.FULLNAME

    name = facts.name
    assert exec_in(cluster, k8s_namespace, name, "id", "-u").stdout.strip() == "65532"
    touched = exec_in(cluster, k8s_namespace, name, "touch", "/probe")
    assert touched.returncode != 0
    assert "Read-only file system" in touched.stderr

    assert "hutch_reconcile_total" in operator.metrics()  # via the Service's ClusterIP

    # The chart's Role is enough for the operator to build a Broker's children; its Pod runs.
    cluster.apply(k8s_namespace, REPO / "examples" / "broker.yaml")
    broker_pod = pods.wait_ready(cluster, k8s_namespace, "hutch-server-0", timeout=180)
    broker_facts = pods.facts(broker_pod)
    assert broker_facts.node == "hutch-node"
    assert broker_facts.containers[0][1].startswith("containerd://")
    claim = cluster.get(
        f"/api/v1/namespaces/{k8s_namespace}/persistentvolumeclaims/data-hutch-server-0"
    )
    assert claim is not None
    assert claim["status"]["phase"] == "Bound"
    assert claim["spec"]["storageClassName"] == clusters.STORAGE_CLASS
    mounted = exec_in(cluster, k8s_namespace, "hutch-server-0", "sh", "-c", "ls /var/lib/hutch")
    assert mounted.returncode == 0, mounted.stderr
    volume = node.node_layout.volumes_dir / claim["spec"]["volumeName"]
    assert sorted(p.name for p in volume.iterdir()) == sorted(mounted.stdout.split())
    assert mounted.stdout.split()  # the broker wrote its store onto the node's disk


# charts/hutch-operator/README.md, "Uninstalling": the documented bound for the three steps.
UNINSTALL_BOUND = 90  # seconds


def test_uninstall_and_namespace_deletion_finish_within_the_documented_bound(
    node: Any, tmp_path: Path
) -> None:
    cluster = clusters.local_cluster(node)
    node.apply_crds(REPO / "crds")
    line = chain.Chain(cluster, f"u-{secrets.token_hex(4)}", tmp_path)
    line.create_namespace()
    try:
        line.start_operator()
        line.create_broker()
        line.start_broker()
        line.apply_topology(REPO / "examples" / "topology.yaml")
        line.stop_broker(line.main.name)  # the port-forward; the Pod stays for the uninstall
        seconds = line.remove(timeout=UNINSTALL_BOUND)
    finally:
        line.stop()
    assert sum(seconds.values()) < UNINSTALL_BOUND, seconds
    assert cluster.get(f"/api/v1/namespaces/{line.namespace}") is None
    assert not pods.list_pods(cluster, line.namespace)
    assert line.operator is None
    cluster_wide = cluster.kubectl("get", "clusterroles,mutatingadmissionpolicies", "-o", "name")
    assert "hutch-operator" not in cluster_wide.stdout


QUEUES = 30  # with as many Bindings: enough that a Pod deleted after the first few is mid-way


def _topology() -> str:
    objects = [clusters.cr("Exchange", "events", {"brokerRef": {"name": "hutch"}, "type": "topic"})]
    for n in range(QUEUES):
        spec = {"brokerRef": {"name": "hutch"}, "limits": {"maxLength": 1000 + n}}
        objects.append(clusters.cr("Queue", f"q{n:02d}", spec))
        binding = {"brokerRef": {"name": "hutch"}, "source": "events", "destination": f"q{n:02d}",
                   "routingKey": f"events.{n}"}  # fmt: skip
        objects.append(clusters.cr("Binding", f"b{n:02d}", binding))
    return clusters.manifest(*objects)


class Write(NamedTuple):
    """One management write as the broker logged it (broker/hutch_broker/admin/audit.py)."""

    method: str
    path: str
    status: int
    client: str  # the writer's address: which operator Pod


def _broker_writes(cluster: clusters.Cluster, namespace: str) -> list[Write]:
    """Every topology write (queues, exchanges, bindings) the broker logged, in order."""
    logs = cluster.kubectl("logs", "-n", namespace, "hutch-server-0", check=False).stdout
    found = re.findall(r"management (PUT|POST|DELETE) (\S+) -> (\d+) \(user \S+ from (\S+)\)", logs)
    writes = [Write(method, path, int(status), client) for method, path, status, client in found]
    return [w for w in writes if w.path.startswith(("/api/queues/", "/api/exchanges/",
                                                    "/api/bindings/"))]  # fmt: skip


def _writers(writes: list[Write], paths: Iterable[str], pods: dict[str, str]) -> dict[str, Any]:
    """path → [(status, which Pod)] for assertion messages."""
    return {p: [(w.status, pods.get(w.client, w.client)) for w in writes if w.path == p]
            for p in paths}  # fmt: skip


def _object_path(plural: str, name: str) -> str:
    """The management path the operator writes for one of ``_topology``'s objects."""
    if plural == "queues":
        return f"/api/queues/%2F/{name}"
    if plural == "exchanges":
        return f"/api/exchanges/%2F/{name}"
    return f"/api/bindings/%2F/e/events/q/q{name[1:]}"


def _ready_paths(cluster: clusters.Cluster, namespace: str) -> set[str]:
    """The paths of the topology objects whose status says Ready (declared and recorded)."""
    ready = set()
    for plural in ("exchanges", "queues", "bindings"):
        items = (cluster.get(clusters.cr_path(namespace, plural)) or {}).get("items", [])
        ready |= {_object_path(plural, o["metadata"]["name"]) for o in items
                  if clusters.is_true(o, "Ready")}  # fmt: skip
    return ready


def _keep_evidence(cluster: clusters.Cluster, namespace: str, pod: str, tmp_path: Path) -> str:
    """The replacement operator's log and the namespace's events, kept beside the test (the
    namespace and its Pods are gone after teardown); returns where, for assertion messages."""
    log_text = cluster.kubectl("logs", "-n", namespace, pod, check=False).stdout
    (tmp_path / "operator.log").write_text(log_text)
    events = cluster.kubectl("get", "events", "-n", namespace, "-o", "wide", check=False).stdout
    (tmp_path / "events.txt").write_text(events)
    return f"operator log and events in {tmp_path}"


def test_a_replaced_operator_pod_converges_with_no_duplicate_broker_writes(
    node: Any, k8s_namespace: str, tmp_path: Path
) -> None:
    """The operator Pod is deleted while it declares 61 objects; its replacement finishes them.

    Read from the broker's own log of management writes, across both Pods: every object is
    created once; nothing the old Pod had recorded as declared is written again; the only
    second write allowed is one idempotent re-declare of an object whose declaration was in
    flight when the old Pod stopped (written, not yet recorded); and once converged, three
    sweeps write nothing. Failed attempts (a Binding whose Queue is not there yet gets 404
    and retries) change nothing and are allowed.
    """
    cluster = clusters.local_cluster(node)
    node.apply_crds(REPO / "crds")
    localnode.provide_volumes(cluster, ["2Gi"])
    sweep = 3.0
    # A quarter of a core, as a small production operator might get: the apply of 61 objects
    # then outruns the operator, so the Pod is deleted mid-way (unthrottled, it had declared
    # all 61 before the first poll saw one Ready).
    resources = {"requests": {"cpu": "100m", "memory": "128Mi"},
                 "limits": {"cpu": "250m", "memory": "256Mi"}}  # fmt: skip
    operator = releases.install(cluster, k8s_namespace, tmp_path, sync_period=sweep,
                                overrides={"resources": resources})  # fmt: skip
    try:
        cluster.apply(k8s_namespace, REPO / "examples" / "broker.yaml")
        pods.wait_ready(cluster, k8s_namespace, "hutch-server-0", timeout=180)
        clusters.wait_condition(cluster, k8s_namespace, "brokers", "hutch", "Ready", timeout=120)
        assert not _broker_writes(cluster, k8s_namespace)

        first = operator.wait_ready()
        cluster.apply(k8s_namespace, _topology())
        clusters.wait_for(lambda: _ready_paths(cluster, k8s_namespace), "a first object Ready",
                          timeout=60, interval=0.1)  # fmt: skip
        recorded = _ready_paths(cluster, k8s_namespace)
        cluster.kubectl("delete", "pod", "-n", k8s_namespace, first["metadata"]["name"],
                        "--wait=false")  # fmt: skip
        assert len(recorded) < 2 * QUEUES + 1, "every object was Ready before the Pod went"

        second = clusters.wait_for(
            lambda: (p := operator.pod()) is not None
            and p["metadata"]["uid"] != first["metadata"]["uid"] and pods.is_ready(p) and p,
            "the replacement operator Pod Ready", timeout=180, interval=0.5,
        )  # fmt: skip
        assert pods.facts(second).node == "hutch-node"
        clusters.wait_all_ready(cluster, k8s_namespace, ["exchanges", "queues", "bindings"],
                                timeout=180)  # fmt: skip
        converged = _broker_writes(cluster, k8s_namespace)
        time.sleep(3 * sweep + 2)  # three sweeps of the new operator
        writes = _broker_writes(cluster, k8s_namespace)
        why = _keep_evidence(cluster, k8s_namespace, second["metadata"]["name"], tmp_path)
        pods_by_ip = {first["status"]["podIP"]: "old Pod", second["status"]["podIP"]: "new Pod"}
        assert writes == converged, f"sweeps wrote: {writes[len(converged) :]}; {why}"

        expected = {_object_path("exchanges", "events")}
        expected |= {_object_path("queues", f"q{n:02d}") for n in range(QUEUES)}
        expected |= {_object_path("bindings", f"b{n:02d}") for n in range(QUEUES)}
        succeeded = collections.Counter(w.path for w in writes if w.status < 300)
        assert set(succeeded) == expected, sorted(set(succeeded) ^ expected)
        created = collections.Counter(w.path for w in writes if w.status == 201)
        assert not [p for p in expected if not p.startswith("/api/bindings/")
                    and created[p] != 1], created  # fmt: skip
        again = {path for path, n in succeeded.items() if n > 1}
        told = f"{_writers(writes, sorted(again), pods_by_ip)}; {why}"
        assert not again & recorded, f"recorded as declared, written again: {told}"
        assert all(succeeded[p] == 2 for p in again), f"written more than twice: {told}"
        assert not [w for w in writes if w.method == "DELETE" or w.status >= 500], writes
        log.info(
            "replaced operator: %d of %d objects recorded when the Pod went, %d re-declared "
            "once, %d writes in all",
            len(recorded),
            len(expected),
            len(again),
            len(writes),
        )
    finally:
        _remove(cluster, k8s_namespace, operator)
