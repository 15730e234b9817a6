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

import secrets
from pathlib import Path
from typing import Any

import pytest
from hutch_testing import chain, clusters, localnode, pods, releases

pytestmark = pytest.mark.timeout(600)

REPO = clusters.REPO_ROOT


def exec_in(cluster: clusters.Cluster, namespace: str, pod: str, *command: str) -> Any:
    return cluster.kubectl("exec", "-n", namespace, pod, "--", *command, check=False)


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
        # The order that strands nothing (charts/hutch-operator/README.md): the Hutch objects
        # while the operator runs, then the release. A release left behind keeps its
        # cluster-wide objects (the next install in this session is refused) and its operator
        # Pod, which would reconcile the later node tests' Brokers too.
        cluster.kubectl("delete", "hutch", "--all", "-n", k8s_namespace, "--wait",
                        "--timeout=120s")  # fmt: skip
        operator.uninstall()
        clusters.wait_for(
            lambda: not pods.list_pods(cluster, k8s_namespace, operator.selector),
            "the operator Pod gone after helm uninstall",
            timeout=120,
        )


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
