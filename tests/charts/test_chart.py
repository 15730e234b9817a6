"""charts/hutch-operator: lint, rendered objects per value set, and an install into the plane."""

from __future__ import annotations

import base64
import filecmp
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hutch_demo.ports import free_port
from hutch_testing import admission

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hutch-operator"

KINDS = [
    "brokers",
    "queues",
    "exchanges",
    "bindings",
    "policies",
    "operatorpolicies",
    "vhosts",
    "users",
    "permissions",
    "topicpermissions",
]
EXPECTED_RULES = [
    {"apiGroups": ["hutch.dev"], "resources": KINDS, "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["hutch.dev"], "resources": [f"{k}/status" for k in KINDS],
     "verbs": ["get", "patch"]},
    {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "patch"]},
    # A Broker Pod that is outdated and not Ready is deleted (a StatefulSet never rolls it).
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]},
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
    # Kopf's /healthz decides Ready; asked every second until it first answers, so Ready does
    # not wait out the 5 s readiness period after a start (a restart, a roll, helm --wait).
    healthz = {"path": "/healthz", "port": "health"}
    startup, readiness = container["startupProbe"], container["readinessProbe"]
    assert startup["httpGet"] == readiness["httpGet"] == healthz
    assert startup["periodSeconds"] == 1 and startup["failureThreshold"] >= 60
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


def test_finalizer_policy_only_where_the_api_is_served(render: Any) -> None:
    assert not by_kind(render(), "MutatingAdmissionPolicy")  # helm's offline default: no v1 API
    served = (admission.POLICY_API,)
    objects = render(api_versions=served)
    [policy] = by_kind(objects, "MutatingAdmissionPolicy")
    [binding] = by_kind(objects, "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert "matchResources" not in binding["spec"]  # all namespaces, as the operator watches
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE"] and "brokers" not in rule["resources"]
    assert sorted(rule["resources"]) == sorted(k for k in KINDS if k != "brokers")
    assert policy["spec"]["failurePolicy"] == "Ignore"
    assert admission.FINALIZER in policy["spec"]["mutations"][0]["applyConfiguration"]["expression"]
    scoped = by_kind(
        render("watchNamespaces={team-a}", api_versions=served), "MutatingAdmissionPolicyBinding"
    )
    [expression] = scoped[0]["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expression["values"] == ["team-a"]
    assert not by_kind(render("admissionFinalizer.enabled=false", api_versions=served),
                       "MutatingAdmissionPolicy")  # fmt: skip


def test_chart_crds_are_a_copy() -> None:
    names = sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    assert names == sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    _, mismatch, errors = filecmp.cmpfiles(REPO / "crds", CHART / "crds", names, shallow=False)
    assert (mismatch, errors) == ([], [])


def test_notes_and_example_present() -> None:
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "kubectl apply --server-side --force-conflicts -f charts/hutch-operator/crds/" in notes
    assert (REPO / "examples" / "topology.yaml").is_file()


@pytest.fixture(scope="module")
def installed(releases: Any, apiserver: Any) -> str:
    """``helm install`` (all namespaces) into the plane, once for this module."""
    namespace = apiserver.create_namespace()
    notes = releases("hutch", namespace)
    assert "watches all namespaces" in notes
    assert "hutch.dev/finalizer at admission" in notes  # the plane serves the v1 API
    crds = str(CHART / "crds")
    apiserver.kubectl("wait", "--for=condition=Established", "--timeout=30s", "-f", crds)
    return namespace


def test_install_into_control_plane(installed: str, apiserver: Any) -> None:
    namespace = installed
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


def test_installed_finalizer_policy_takes_effect(installed: str, apiserver: Any) -> None:
    """The apiserver serves MutatingAdmissionPolicy v1 (1.36), so the install rendered it."""
    admission.await_finalizer(apiserver.api, apiserver.create_namespace())


def _service_account_kubeconfig(apiserver: Any, namespace: str, path: Path) -> Path:
    """A kubeconfig holding a TokenRequest token of the chart's ServiceAccount."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 3600}}  # fmt: skip
    status, reply = apiserver.api(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/hutch-operator/token", request
    )
    assert status == 201, reply
    cluster = {"server": apiserver.server, "certificate-authority": str(apiserver.pki / "ca.crt")}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "plane", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": reply["status"]["token"]}}],
        "contexts": [{"name": "sa", "context": {"cluster": "plane", "user": "sa"}}],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


def _chart_container(helm: Path, apiserver: Any, namespace: str) -> dict[str, Any]:
    manifest = subprocess.run(
        [str(helm), "get", "manifest", "hutch", "-n", namespace, "--kubeconfig",
         str(apiserver.kubeconfig)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    [deployment] = by_kind([d for d in yaml.safe_load_all(manifest) if d], "Deployment")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.mark.timeout(400)
def test_operator_works_with_the_chart_rbac(
    installed: str, helm: Path, apiserver: Any, hutch_broker: Any, tmp_path: Path
) -> None:
    """The operator, run with the installed chart's args, env and ServiceAccount token, takes a
    Broker and every topology kind through create and delete: RBAC that lacks a verb it uses
    fails here, not only in a `kubectl auth can-i` list."""
    container = _chart_container(helm, apiserver, installed)
    health = free_port()
    args = [a if not a.startswith("--liveness=") else f"--liveness=http://127.0.0.1:{health}/healthz"
            for a in container["args"]]  # fmt: skip
    assert "--peering=hutch-operator" in args and "--all-namespaces" in args
    work = apiserver.create_namespace()
    env = {**os.environ, **{e["name"]: e["value"] for e in container["env"]},
           "HUTCH_METRICS_PORT": "0", "HUTCH_SYNC_PERIOD": "2", "HUTCH_BROKER_STATUS_PERIOD": "2",
           "KUBECONFIG": str(_service_account_kubeconfig(apiserver, installed, tmp_path / "sa")),
           "HUTCH_BROKER_ADDRESSES": f"{work}/b={hutch_broker.http_url}|{hutch_broker.amqp_url}",
           "PYTHONPATH": str(REPO / "operator")}  # fmt: skip
    log_path = tmp_path / "operator.log"
    with log_path.open("wb") as log:
        operator = subprocess.Popen(
            [sys.executable, "-m", "hutch_operator", *args], env=env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        try:
            _drive_every_kind(apiserver, work, hutch_broker)
        except AssertionError as failure:
            tail = log_path.read_text(errors="replace")[-4000:]
            raise AssertionError(f"{failure}\noperator log tail:\n{tail}") from None
    finally:
        operator.terminate()
        try:
            operator.wait(20)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
    text = log_path.read_text(errors="replace")
    # A status code, not a port such as 40337 in another test's leftover broker address.
    assert "Forbidden" not in text and not re.search(r"\b403\b", text), text[-3000:]


def _drive_every_kind(apiserver: Any, namespace: str, broker: Any) -> None:
    base = f"/apis/hutch.dev/v1alpha1/namespaces/{namespace}"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b-default-user"},
              "stringData": {"username": broker.username, "password": broker.password}}  # fmt: skip
    apiserver.create(f"/api/v1/namespaces/{namespace}/secrets", secret)
    ref = {"brokerRef": {"name": "b"}}
    objects = [
        ("brokers", "Broker", "b", {}),
        ("queues", "Queue", "rbac-q", {**ref, "limits": {"maxLength": 10}}),
        ("exchanges", "Exchange", "rbac-x", {**ref, "type": "fanout"}),
        ("bindings", "Binding", "rbac-bind",
         {**ref, "source": "rbac-x", "destination": "rbac-q", "destinationType": "queue"}),
        ("policies", "Policy", "rbac-p", {**ref, "pattern": "^rbac-", "definition": {"max-length": 5}}),
        ("operatorpolicies", "OperatorPolicy", "rbac-op",
         {**ref, "pattern": "^rbac-", "definition": {"max-length": 7}}),
        ("vhosts", "Vhost", "rbac-vh", ref),
        ("users", "User", "rbac-u", {**ref, "uriVhost": "rbac-vh"}),
        ("permissions", "Permission", "rbac-perm",
         {**ref, "vhost": "rbac-vh", "user": "rbac-u", "read": ".*"}),
        ("topicpermissions", "TopicPermission", "rbac-tp",
         {**ref, "vhost": "rbac-vh", "user": "rbac-u", "exchange": "amq.topic", "write": "^a"}),
    ]  # fmt: skip
    for plural, kind, name, spec in objects:
        apiserver.create(f"{base}/{plural}", {"apiVersion": "hutch.dev/v1alpha1", "kind": kind,
                                              "metadata": {"name": name}, "spec": spec})  # fmt: skip
    for plural, _, name, _ in objects:
        condition = "Available" if plural == "brokers" else "Ready"
        _wait(lambda p=plural, n=name, c=condition: _condition(apiserver, f"{base}/{p}/{n}", c),
              f"{plural}/{name} {condition}")  # fmt: skip
    _, sts = apiserver.api("GET", f"/apis/apps/v1/namespaces/{namespace}/statefulsets/b-server")
    assert sts.get("kind") == "StatefulSet"
    _rotate_user_password(apiserver, namespace)
    for plural, _, name, _ in reversed(objects[1:]):
        apiserver.api("DELETE", f"{base}/{plural}/{name}")
        _wait(lambda p=plural, n=name: apiserver.api("GET", f"{base}/{p}/{n}")[0] == 404,
              f"{plural}/{name} deleted")  # fmt: skip


def _rotate_user_password(apiserver: Any, namespace: str) -> None:
    """The User's Secret: created by the operator, and patched by it on rotation."""
    path = f"/api/v1/namespaces/{namespace}/secrets/rbac-u-user-credentials"
    apiserver.kubectl("-n", namespace, "patch", "secret", "rbac-u-user-credentials",
                      "--type=merge", "-p", '{"stringData": {"password": "rotated-pw"}}')  # fmt: skip

    def rotated() -> bool:
        data = apiserver.api("GET", path)[1].get("data", {})
        return "rotated-pw" in base64.b64decode(data.get("amqp-uri", "")).decode()

    _wait(rotated, "the rotated password in amqp-uri")


def _condition(apiserver: Any, path: str, type_: str) -> bool:
    _, obj = apiserver.api("GET", path)
    conditions = obj.get("status", {}).get("conditions", [])
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def _wait(check: Any, what: str, timeout: float = 120.0) -> None:
    """Generous: the operator watches all namespaces, and earlier tests may have left objects
    in the session's plane that it works through too."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)
