"""The node tier's dynamic provisioner (hutch_localkube.provisioner; issue 31 item 6).

Before it, a claim no script had pre-made a PV for stayed Pending ("didn't find available
persistent volumes to bind"): any second Broker. The pure decisions are pinned first, without a
cluster; then on the node, a claim that names no class is bound to a volume the provisioner
made on the node's disk, a Pod writes through it, and deleting the claim removes the PV and its
directory. The second Broker of a ``make run --keep`` is bound the same way
(tests/quickstart/test_keep.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import clusters
from hutch_localkube import provisioner

ROOT = Path("/run-dir/volumes")
CLASSES = {
    "hutch-local": provisioner.storage_class(),
    "hutch-test": {
        "metadata": {"name": "hutch-test"},
        "provisioner": "kubernetes.io/no-provisioner",
    },
}


def claim(**overrides: Any) -> dict[str, Any]:
    annotations = overrides.pop("annotations", {provisioner.SELECTED_NODE: "hutch-node"})
    spec = {
        "storageClassName": "hutch-local",
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "2Gi"}},
        **overrides.pop("spec", {}),
    }
    return {
        "metadata": {"name": "data-b-server-0", "namespace": "team-b", "uid": "u-1",
                     "annotations": annotations},
        "spec": spec,
        "status": {"phase": "Pending"},
        **overrides,
    }  # fmt: skip


def test_a_pending_claim_of_the_class_scheduled_to_the_node_is_provisioned() -> None:
    assert provisioner.to_provision(claim(), CLASSES) is CLASSES["hutch-local"]


@pytest.mark.parametrize(
    ("why", "pending"),
    [
        ("no Pod scheduled yet (WaitForFirstConsumer)", claim(annotations={})),
        ("scheduled to a kwok Node", claim(annotations={provisioner.SELECTED_NODE: "kwok-node-0"})),
        ("another class", claim(spec={"storageClassName": "hutch-test"})),
        ("already bound", claim(spec={"volumeName": "pv-1"})),
        ("a block device", claim(spec={"volumeMode": "Block"})),
        ("bound phase", claim(status={"phase": "Bound"})),
    ],
)
def test_claims_it_must_leave_alone(why: str, pending: dict[str, Any]) -> None:
    assert provisioner.to_provision(pending, CLASSES) is None, why


def test_the_volume_is_a_local_directory_on_the_node_pre_bound_to_the_claim() -> None:
    volume = provisioner.volume_for(claim(), CLASSES["hutch-local"], ROOT)
    assert volume["metadata"] == {
        "name": "pvc-u-1",
        "annotations": {provisioner.PROVISIONED_BY: provisioner.PROVISIONER},
    }
    spec = volume["spec"]
    assert spec["local"] == {"path": "/run-dir/volumes/pvc-u-1"}
    assert spec["capacity"] == {"storage": "2Gi"}
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert spec["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                "namespace": "team-b", "name": "data-b-server-0", "uid": "u-1"}  # fmt: skip
    (term,) = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == ["hutch-node"]


def released(**changes: Any) -> dict[str, Any]:
    volume = provisioner.volume_for(claim(), CLASSES["hutch-local"], ROOT)
    volume["status"] = {"phase": "Released"}
    for key, value in changes.items():
        volume["spec"][key] = value
    return volume


def test_only_its_own_released_delete_volumes_under_its_root_are_deleted() -> None:
    assert provisioner.to_delete(released(), ROOT) == ROOT / "pvc-u-1"
    assert provisioner.to_delete(released(persistentVolumeReclaimPolicy="Retain"), ROOT) is None
    assert provisioner.to_delete(released(local={"path": "/etc"}), ROOT) is None
    assert provisioner.to_delete(released(local={"path": str(ROOT)}), ROOT) is None
    bound = released()
    bound["status"] = {"phase": "Bound"}
    assert provisioner.to_delete(bound, ROOT) is None
    foreign = released()
    foreign["metadata"]["annotations"] = {}
    assert provisioner.to_delete(foreign, ROOT) is None


def test_mounts_under_a_volume_are_found() -> None:
    mounts = (
        "36 35 98:0 / /run-dir/volumes/pvc-u-1 rw - ext4 /dev/x rw\n"
        "37 35 98:0 / /run-dir/volumes/pvc-u-10 rw - ext4 /dev/x rw\n"
        "38 35 98:0 / /run-dir/volumes/pvc-u-1/sub rw - ext4 /dev/x rw\n"
    )
    assert provisioner.mounted_under(ROOT / "pvc-u-1", mounts) == [
        "/run-dir/volumes/pvc-u-1",
        "/run-dir/volumes/pvc-u-1/sub",
    ]


# --- on the node ---------------------------------------------------------------------------


def _content(path: Path) -> str:
    """The file's text once it ends its first line, "" before (not there, or being written)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return ""
    return text if text.endswith("\n") else ""


def _wait(what: str, probe: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result:
            return result
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def _get(node: Any, path: str) -> dict[str, Any] | None:
    status, obj = node.api("GET", path)
    return obj if status == 200 else None


def _writer(claim_name: str) -> dict[str, Any]:
    """A Pod of the broker image writing one file through the claim, then idling."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "writer"},
        "spec": {
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [{
                "name": "writer", "image": "localhost/hutch/hutch-broker:0.1.0",
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "echo written > /data/file && exec sleep 3600"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
        },
    }  # fmt: skip


@pytest.mark.timeout(300)
def test_a_claim_naming_no_class_is_provisioned_on_the_node_and_cleaned_up(
    node: Any, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    # The node starts with hutch-local as the default class; a test before this one may have
    # made its pre-made volumes' class the default (localnode.provide_volumes): undo that.
    for name, default in ((provisioner.STORAGE_CLASS, "true"), (clusters.STORAGE_CLASS, "false")):
        patch = {"metadata": {"annotations": {provisioner.DEFAULT_CLASS: default}}}
        node.kubectl("patch", "storageclass", name, "--type=merge", "-p", json.dumps(patch))
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
           "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
    created = node.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", pvc)
    assert created["spec"]["storageClassName"] == provisioner.STORAGE_CLASS  # the default
    node.create(f"/api/v1/namespaces/{ns}/pods", _writer("data"))

    claim_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data"
    bound = _wait("the claim Bound", lambda: (c := _get(node, claim_path))
                  and c.get("status", {}).get("phase") == "Bound" and c)  # fmt: skip
    volume_name = bound["spec"]["volumeName"]
    assert volume_name == f"pvc-{created['metadata']['uid']}"
    volume = _get(node, f"/api/v1/persistentvolumes/{volume_name}")
    assert volume is not None
    assert volume["metadata"]["annotations"][provisioner.PROVISIONED_BY] == provisioner.PROVISIONER
    directory = Path(volume["spec"]["local"]["path"])
    assert directory == node.node_layout.volumes_dir.resolve() / volume_name
    # Its content, not its existence: the shell creates the file before echo writes to it.
    _wait("the Pod's line in its file on the node's disk", lambda: _content(directory / "file"))
    assert (directory / "file").read_text() == "written\n"
    assert directory.stat().st_gid == 1000  # kubelet applied fsGroup to the volume
    events = node.kubectl("get", "events", "-n", ns, "-o", "json").stdout
    assert "ProvisioningSucceeded" in events

    node.kubectl("delete", "pod", "-n", ns, "writer", "--wait=true")
    node.kubectl("delete", "pvc", "-n", ns, "data", "--wait=true")
    _wait("the released PV deleted", lambda: _get(node, f"/api/v1/persistentvolumes/{volume_name}") is None)  # fmt: skip
    assert not directory.exists()
    log = (node.logs / "provisioner.log").read_text()
    assert f"deleted {volume_name}" in log, log
