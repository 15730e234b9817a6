"""The node tier's dynamic provisioner: a PVC of class ``hutch-local`` gets a directory on the
node's disk and a ``local`` PV bound to it, as kind's local-path-provisioner does.

Why: with pre-made PVs only, any Broker beyond the ones a script prepared stayed Pending
("didn't find available persistent volumes to bind"), so the node did not behave like a
cluster a user knows. Why a host process of the plane and not a Pod (docs/real-node.md,
"Storage"): the node's disk is this machine's, nothing can be pulled from a registry, and a
Pod would need a privileged hostPath mount of the run dir and an image of its own; the plane
already runs CoreDNS the same way, with a certificate identity and a ClusterRole of its own.

The protocol is Kubernetes' for external provisioners. ``hutch-local`` is the default class,
``WaitForFirstConsumer``: the scheduler picks the node and writes it into the claim's
``volume.kubernetes.io/selected-node`` annotation. This process then makes
``<volumes dir>/pvc-<claim uid>`` and a PV of that name pre-bound to the claim (``claimRef``),
pinned to that node, annotated ``pv.kubernetes.io/provisioned-by``; kube-controller-manager
binds the two. When the claim is deleted the PV turns ``Released``; with the class's
``reclaimPolicy: Delete`` this process removes the directory (never while anything is
mounted under it) and then the PV. It lists every 0.5 s rather than watching: the apiserver
is on loopback and a list is a few milliseconds, and there is no watch to re-establish.

The decisions (``to_provision``, ``volume_for``, ``to_delete``) are pure functions of the
listings, tested without a cluster; ``main`` is the loop, run as
``python -m hutch_localkube.provisioner --server URL --pki DIR --root DIR``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import shutil
import signal
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from hutch_localkube import realnode

PROVISIONER = "hutch.dev/local-path"
STORAGE_CLASS = "hutch-local"
USER = "system:hutch-local-provisioner"  # its certificate's CN, bound to a ClusterRole
NODE_NAME = realnode.NODE_NAME
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
POLL_SECONDS = 0.5
READY_LINE = "provisioner: watching"  # the plane waits for this line in its log

log = logging.getLogger("hutch.provisioner")


def storage_class() -> dict[str, Any]:
    """The default class of the node tier, served by this provisioner."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": {DEFAULT_CLASS: "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def rbac() -> list[tuple[str, dict[str, Any]]]:
    """Its ClusterRole and binding to its certificate user: (path, object) pairs."""
    meta = {"name": USER}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta,
        "rules": [
            {"apiGroups": [""], "resources": ["persistentvolumes"],
             "verbs": ["get", "list", "create", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list"]},
            {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"],
             "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        ],
    }  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }
    base = "/apis/rbac.authorization.k8s.io/v1"
    return [(f"{base}/clusterroles", role), (f"{base}/clusterrolebindings", binding)]


# --- decisions (pure) ------------------------------------------------------------------------


def ours(classes: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The classes this provisioner serves, by name."""
    return {name: sc for name, sc in classes.items() if sc.get("provisioner") == PROVISIONER}


def to_provision(
    claim: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The class to provision ``claim`` from, or None: it is not ours, already bound, or
    (``WaitForFirstConsumer``) no Pod using it has been scheduled to this node yet."""
    spec, meta = claim.get("spec") or {}, claim.get("metadata") or {}
    sc = ours(classes).get(str(spec.get("storageClassName") or ""))
    if sc is None or spec.get("volumeName") or meta.get("deletionTimestamp"):
        return None
    if (claim.get("status") or {}).get("phase", "Pending") != "Pending":
        return None
    if spec.get("volumeMode", "Filesystem") != "Filesystem":
        return None  # a directory cannot be a block device
    selected = (meta.get("annotations") or {}).get(SELECTED_NODE)
    if sc.get("volumeBindingMode", "Immediate") == "WaitForFirstConsumer" and selected is None:
        return None
    if selected is not None and selected != NODE_NAME:
        return None  # a kwok Node: nothing runs there
    return sc


def volume_name(claim: Mapping[str, Any]) -> str:
    """``pvc-<uid>``, as Kubernetes' own provisioners name them: unique, and stable across a
    restart of this process (a second attempt finds the first one's PV)."""
    return f"pvc-{claim['metadata']['uid']}"


def volume_for(claim: Mapping[str, Any], sc: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """The PV for ``claim``: a ``local`` volume at ``root/pvc-<uid>`` on this node, of the
    size the claim requests, pre-bound to it."""
    meta, spec = claim["metadata"], claim["spec"]
    name = volume_name(claim)
    selector = {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAME]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
            "storageClassName": spec["storageClassName"],
            "volumeMode": "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "local": {"path": str(root / name)},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [selector]}]}},
        },
    }


def to_delete(volume: Mapping[str, Any], root: Path) -> Path | None:
    """The directory of a PV of ours that was released under ``reclaimPolicy: Delete``, or
    None. Only a directory directly under ``root`` is ever named."""
    meta, spec = volume.get("metadata") or {}, volume.get("spec") or {}
    if (meta.get("annotations") or {}).get(PROVISIONED_BY) != PROVISIONER:
        return None
    if (volume.get("status") or {}).get("phase") != "Released":
        return None
    if spec.get("persistentVolumeReclaimPolicy") != "Delete":
        return None  # Retain: the data stays, as the class or the user asked
    path = Path(str((spec.get("local") or {}).get("path", "")))
    if path.parent != root or path.name != meta.get("name"):
        return None
    return path


def mounted_under(path: Path, mounts: str) -> list[str]:
    """Mount points at or under ``path`` in /proc/self/mountinfo text ``mounts``."""
    prefix = str(path)
    points = [line.split()[4] for line in mounts.splitlines() if len(line.split()) > 4]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


# --- the loop ----------------------------------------------------------------------------------


class Api:
    """The apiserver as this process's certificate user (no client library: a fast start)."""

    def __init__(self, server: str, pki_dir: Path) -> None:
        self.server = server
        self.context = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
        stem = pki_dir / "provisioner"
        self.context.load_cert_chain(f"{stem}.crt", f"{stem}.key")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - https to the plane's apiserver
            self.server + path, data=data, method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=10) as reply:  # noqa: S310
                return reply.status, json.loads(reply.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def items(self, path: str) -> list[dict[str, Any]]:
        status, listed = self.call("GET", path)
        if status != 200:
            raise OSError(f"GET {path}: {status} {listed.get('message', '')}")
        return list(listed.get("items") or [])


class Provisioner:
    def __init__(self, api: Api, root: Path) -> None:
        self.api = api
        self.root = root
        self.waiting: set[str] = set()  # volumes whose directory still had a mount (said once)

    def once(self) -> None:
        """One pass: provision every claim that needs it, delete every released volume."""
        classes = {
            sc["metadata"]["name"]: sc
            for sc in self.api.items("/apis/storage.k8s.io/v1/storageclasses")
        }
        volumes = {pv["metadata"]["name"]: pv for pv in self.api.items("/api/v1/persistentvolumes")}
        for claim in self.api.items("/api/v1/persistentvolumeclaims"):
            sc = to_provision(claim, classes)
            if sc is not None and volume_name(claim) not in volumes:
                self.provision(claim, sc)
        for volume in volumes.values():
            path = to_delete(volume, self.root)
            if path is not None:
                self.delete(volume, path)

    def provision(self, claim: Mapping[str, Any], sc: Mapping[str, Any]) -> None:
        volume = volume_for(claim, sc, self.root)
        path = Path(volume["spec"]["local"]["path"])
        path.mkdir(parents=True, exist_ok=True)
        status, reply = self.api.call("POST", "/api/v1/persistentvolumes", volume)
        meta = claim["metadata"]
        ref = f"{meta['namespace']}/{meta['name']}"
        if status not in (201, 409):
            log.error("PV for %s: %s %s", ref, status, reply.get("message"))
            self.event(claim, "Warning", "ProvisioningFailed", f"{status} {reply.get('message')}")
            return
        size = volume["spec"]["capacity"]["storage"]
        log.info("provisioned %s (%s) for %s at %s", volume["metadata"]["name"], size, ref, path)
        message = f"Successfully provisioned volume {volume['metadata']['name']} at {path}"
        self.event(claim, "Normal", "ProvisioningSucceeded", message)

    def delete(self, volume: Mapping[str, Any], path: Path) -> None:
        name = volume["metadata"]["name"]
        mounts = mounted_under(path, Path("/proc/self/mountinfo").read_text())
        if mounts:
            if name not in self.waiting:
                log.info("%s released; waiting for %s to be unmounted", name, mounts[0])
                self.waiting.add(name)
            return
        self.waiting.discard(name)
        shutil.rmtree(path, ignore_errors=True)
        status, reply = self.api.call("DELETE", f"/api/v1/persistentvolumes/{name}")
        if status not in (200, 202, 404):
            log.error("deleting PV %s: %s %s", name, status, reply.get("message"))
            return
        log.info(
            "deleted %s and its directory %s (claim released, reclaimPolicy Delete)", name, path
        )

    def event(self, claim: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """An Event on the claim, as ``kubectl describe pvc`` shows a provisioner's."""
        meta = claim["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                               "namespace": meta["namespace"], "name": meta["name"],
                               "uid": meta["uid"]},
            "reason": reason, "message": message, "type": type_,
            "source": {"component": PROVISIONER},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        self.api.call("POST", f"/api/v1/namespaces/{meta['namespace']}/events", event)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hutch_localkube.provisioner")
    parser.add_argument("--server", required=True, help="the apiserver URL")
    parser.add_argument("--pki", type=Path, required=True, help="ca.crt, provisioner.crt/.key")
    parser.add_argument("--root", type=Path, required=True, help="where volumes are made")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    args.root.mkdir(parents=True, exist_ok=True)
    provisioner = Provisioner(Api(args.server, args.pki), args.root.resolve())
    said_ready = False
    while True:
        try:
            provisioner.once()
        except (OSError, ValueError) as exc:  # the apiserver restarting, a torn reply
            log.warning("pass failed: %s", exc)
        else:
            if not said_ready:
                log.info("%s for class %s (%s), volumes under %s, pid %d", READY_LINE,
                         STORAGE_CLASS, PROVISIONER, args.root, os.getpid())  # fmt: skip
                said_ready = True
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
