"""Smoke tests: the local control plane is a real Kubernetes, not a mock.

Each test checks one behaviour Hutch relies on and a mock would fake: the apiserver enforcing a
CRD's structural schema and CEL rules, the controller-manager/scheduler/kwok chain making a
Deployment's Pod Ready on a fake Node, and the namespace controller finishing a deletion.
"""

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.k8s

GROUP = "smoke.hutch.dev"
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer", "minimum": 1},
                                    "maxReplicas": {"type": "integer", "default": 3},
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.replicas <= self.maxReplicas",
                                        "message": "replicas must not exceed maxReplicas",
                                    }
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def wait_for(what: str, probe: Any, timeout: float = 60) -> Any:
    """Polls ``probe`` until it returns something truthy; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def widget(name: str, **spec: int) -> dict[str, Any]:
    """A Widget custom object with the given spec fields."""
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


def test_server_reports_pinned_version(apiserver):
    """/version is stamped (build ldflags) and kubectl is within the supported skew."""
    _, version = apiserver.api("GET", "/version")
    assert version["gitVersion"].startswith("v1.36.")
    client = json.loads(apiserver.kubectl("version", "-o", "json").stdout)["clientVersion"]
    assert client["minor"] == version["minor"] == "36"


def test_crd_schema_and_cel_are_enforced(apiserver, k8s_namespace, tmp_path: Path):
    """The apiserver prunes unknown fields, applies defaults and refuses a CEL violation."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    crd_file = tmp_path / "widgets.json"
    crd_file.write_text(json.dumps(WIDGET_CRD))
    apiserver.apply_crds(crd_file)
    objects = client.CustomObjectsApi(apiserver.api_client())
    args = {"group": GROUP, "version": "v1", "namespace": k8s_namespace, "plural": "widgets"}

    good = widget("good", replicas=2, bogus=1)
    created = objects.create_namespaced_custom_object(**args, body=good)
    assert created["spec"] == {"replicas": 2, "maxReplicas": 3}  # pruned and defaulted

    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(**args, body=widget("bad", replicas=5))
    assert refused.value.status == 422
    assert "replicas must not exceed maxReplicas" in refused.value.body


def test_deployment_pod_becomes_ready_on_kwok_node(workloads, k8s_namespace):
    """controller-manager -> scheduler -> kwok: a Deployment's Pod runs Ready on a fake Node."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "smoke", "namespace": k8s_namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "smoke"}},
            "template": {
                "metadata": {"labels": {"app": "smoke"}},
                # Never pulled: kwok runs no containers.
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/smoke:1"}]},
            },
        },
    }
    workloads.kubectl("apply", "-f", "-", stdin=json.dumps(deployment))
    workloads.kubectl(
        "wait",
        "-n",
        k8s_namespace,
        "--for=condition=Available",
        "--timeout=60s",
        "deployment/smoke",
    )
    pods = json.loads(
        workloads.kubectl(
            "get", "pods", "-n", k8s_namespace, "-l", "app=smoke", "-o", "json"
        ).stdout
    )["items"]
    assert len(pods) == 1
    pod = pods[0]
    assert pod["spec"]["nodeName"].startswith("kwok-node-")
    assert pod["status"]["phase"] == "Running"
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready["Ready"] == "True"


def test_namespace_deletion_completes(workloads):
    """The namespace controller empties and removes a namespace, Pods included (kwok deletes)."""
    name = workloads.create_namespace()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": name},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/smoke:1"}]},
    }
    workloads.create(f"/api/v1/namespaces/{name}/pods", pod)
    workloads.create(
        f"/api/v1/namespaces/{name}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
    )
    wait_for(
        "pod scheduled",
        lambda: (
            workloads.api("GET", f"/api/v1/namespaces/{name}/pods/p")[1]
            .get("spec", {})
            .get("nodeName")
        ),
    )

    workloads.delete_namespace(name)
    wait_for(
        f"namespace {name} gone",
        lambda: workloads.api("GET", f"/api/v1/namespaces/{name}")[0] == 404,
    )


def test_make_pvs_binds_a_claim(workloads, k8s_namespace, make_pvs):
    """StatefulSet-style PVCs bind to pre-created hutch-test PVs once a Pod is scheduled."""
    make_pvs(1)
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "hutch-test",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    workloads.create(f"/api/v1/namespaces/{k8s_namespace}/persistentvolumeclaims", claim)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "user"},
        "spec": {
            "containers": [{"name": "c", "image": "registry.invalid/smoke:1"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    workloads.create(f"/api/v1/namespaces/{k8s_namespace}/pods", pod)
    path = f"/api/v1/namespaces/{k8s_namespace}/persistentvolumeclaims/data"
    wait_for(
        "claim Bound",
        lambda: workloads.api("GET", path)[1].get("status", {}).get("phase") == "Bound",
    )
