"""charts/hutch-operator: lint, rendered objects per value set, and an install into the plane."""

from __future__ import annotations

import filecmp
import json
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hutch-operator"

KINDS = ["brokers", "queues", "exchanges", "bindings", "policies", "operatorpolicies"]
EXPECTED_RULES = [
    {"apiGroups": ["hutch.dev"], "resources": KINDS, "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["hutch.dev"], "resources": [f"{k}/status" for k in KINDS],
     "verbs": ["get", "patch"]},
    {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create"]},
    {"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "patch"]},
    {"apiGroups": ["apps"], "resources": ["statefulsets"],
     "verbs": ["get", "create", "patch", "delete"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
     "verbs": ["get", "create", "patch"]},
]  # fmt: skip
CLUSTER_PEERING_RULE = {
    "apiGroups": ["kopf.dev"],
    "resources": ["clusterkopfpeerings"],
    "verbs": ["get", "list", "watch", "patch"],
}


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_lint(helm: Path) -> None:
    result = subprocess.run(
        [str(helm), "lint", str(CHART), "--kube-version", "1.36.4", "--strict"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_values_cluster_wide(render: Any) -> None:
    objects = render()
    (role,) = by_kind(objects, "ClusterRole")
    assert role["rules"] == [*EXPECTED_RULES, CLUSTER_PEERING_RULE]
    assert not by_kind(objects, "Role")
    (binding,) = by_kind(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "hutch-operator", "namespace": "hutch-system"}
    ]
    assert [p["metadata"]["name"] for p in by_kind(objects, "ClusterKopfPeering")] == [
        "hutch-operator"
    ]
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "hutch-operator:0.1.0"
    assert "--all-namespaces" in container["args"]
    assert "--peering=hutch-operator" in container["args"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "HUTCH_SYNC_PERIOD": "300",
        "HUTCH_WORKERS": "0",
        "HUTCH_DELETE_TIMEOUT": "300",
        "HUTCH_BROKER_CONNECT_TIMEOUT": "3",
        "HUTCH_BROKER_READ_TIMEOUT": "10",
        "HUTCH_QUEUE_STATS": "true",
        "HUTCH_DEFAULT_BROKER_IMAGE": "hutch-broker:0.1.0",
        "HUTCH_METRICS_PORT": "8080",
    }
    assert pod["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["limits"] == {"memory": "256Mi"}
    assert by_kind(objects, "Service")[0]["spec"]["ports"][0]["port"] == 8080
    assert not by_kind(objects, "ServiceMonitor")


def test_watch_namespaces_gives_roles_only(render: Any) -> None:
    objects = render("watchNamespaces={team-a,team-b}", "operator.syncPeriod=60")
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding")
    roles = by_kind(objects, "Role")
    assert [r["metadata"]["namespace"] for r in roles] == ["team-a", "team-b"]
    assert all(r["rules"] == EXPECTED_RULES for r in roles)
    bindings = by_kind(objects, "RoleBinding")
    assert [b["metadata"]["namespace"] for b in bindings] == ["team-a", "team-b"]
    peerings = by_kind(objects, "KopfPeering")
    assert [p["metadata"]["namespace"] for p in peerings] == ["team-a", "team-b"]
    container = by_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert [a for a in container["args"] if a.startswith("--namespace")] == [
        "--namespace=team-a", "--namespace=team-b",
    ]  # fmt: skip
    assert "--all-namespaces" not in container["args"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["HUTCH_SYNC_PERIOD"] == "60"


def test_metrics_and_image_values(render: Any) -> None:
    objects = render(
        "metrics.serviceMonitor.enabled=true", "image.tag=9.9.9", "broker.image.tag=1.2.3",
        "replicaCount=2",
    )  # fmt: skip
    assert len(by_kind(objects, "ServiceMonitor")) == 1
    deployment = by_kind(objects, "Deployment")[0]
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "hutch-operator:9.9.9"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["HUTCH_DEFAULT_BROKER_IMAGE"] == "hutch-broker:1.2.3"
    objects = render("metrics.enabled=false", "rbac.create=false")
    assert not by_kind(objects, "Service") and not by_kind(objects, "ClusterRole")


def test_chart_crds_are_a_copy() -> None:
    names = sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    assert names == sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    _, mismatch, errors = filecmp.cmpfiles(REPO / "crds", CHART / "crds", names, shallow=False)
    assert (mismatch, errors) == ([], [])


def test_notes_and_example_present() -> None:
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "kubectl apply --server-side --force-conflicts -f charts/hutch-operator/crds/" in notes
    assert (REPO / "examples" / "topology.yaml").is_file()


def test_install_into_control_plane(helm: Path, apiserver: Any) -> None:
    namespace = apiserver.create_namespace()
    result = subprocess.run(
        [str(helm), "install", "hutch", str(CHART), "-n", namespace, "--kubeconfig",
         str(apiserver.kubeconfig)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "watches all namespaces" in result.stdout
    status, crd = apiserver.api(
        "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/queues.hutch.dev"
    )
    assert status == 200 and crd["spec"]["names"]["shortNames"] == ["hq"]
    assert (
        apiserver.api("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/hutch-operator")[0]
        == 200
    )

    sa = f"system:serviceaccount:{namespace}:hutch-operator"

    def can(verb: str, resource: str) -> bool:
        out = apiserver.kubectl(
            "auth", "can-i", verb, resource, "--as", sa, "-n", "anywhere", check=False
        )
        return out.stdout.strip() == "yes"

    assert can("patch", "queues.hutch.dev") and can("patch", "queues.hutch.dev/status")
    assert can("watch", "brokers.hutch.dev") and can("delete", "statefulsets.apps")
    assert can("get", "secrets") and can("create", "secrets")
    assert not can("list", "secrets") and not can("watch", "secrets")
    assert not can("delete", "queues.hutch.dev") and not can("delete", "configmaps")
    assert not can("list", "customresourcedefinitions.apiextensions.k8s.io")
    listing = json.loads(apiserver.kubectl("get", "clusterkopfpeerings", "-o", "json").stdout)
    assert [p["metadata"]["name"] for p in listing["items"]] == ["hutch-operator"]
