"""The node tier: hutch-broker runs in a real container on a real kubelet (issue 12).

Each test checks something kwok can only pretend: the readiness probe really dials the broker,
the container's memory cgroup really carries the Pod's limit, AMQP really reaches the Pod through
its Service's ClusterIP (kube-proxy's nftables rules, over the node's bridge), and a StatefulSet
Pod deleted by kubectl comes back on the same local PV with its confirmed persistent messages.
Under HUTCH_K8S_REQUIRED=1 a node that cannot start fails these tests (never a skip).
"""

from __future__ import annotations

import datetime
import json
import re
import secrets
import time
from pathlib import Path
from typing import Any

import pika
import pytest
from hutch_localkube import imagestore, realnode

pytestmark = pytest.mark.k8s

IMAGE = "localhost/hutch/hutch-broker:0.1.0"
USER = "hutch"
PASSWORD = secrets.token_hex(8)
LIMIT = "256Mi"
LIMIT_BYTES = 256 * 1024 * 1024
LABELS = {"app": "hutch-broker"}


def wait_for(what: str, probe: Any, timeout: float = 120) -> Any:
    """Polls until probe() is truthy; the failure names what never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result:
            return result
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def broker_container() -> dict[str, Any]:
    """The broker container as the operator builds it: TCP probes, restricted, read-only root."""
    return {
        "name": "hutch-broker",
        "image": IMAGE,
        "imagePullPolicy": "Never",
        "env": [
            {"name": "HUTCH_DEFAULT_USER", "value": USER},
            {"name": "HUTCH_DEFAULT_PASS", "value": PASSWORD},
        ],
        "ports": [
            {"name": "amqp", "containerPort": 5672},
            {"name": "http", "containerPort": 15672},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": LIMIT}, "limits": {"memory": LIMIT}},
        "readinessProbe": {"tcpSocket": {"port": "amqp"}, "periodSeconds": 1},
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/hutch"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def pod_spec(data_volume: dict[str, Any] | None) -> dict[str, Any]:
    """uid/gid/fsGroup 1000 as the Dockerfile's USER; data from a PVC or an emptyDir."""
    volumes = [{"name": "tmp", "emptyDir": {}}]
    if data_volume is not None:
        volumes.append(data_volume)
    return {
        "securityContext": {
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 5,
        "containers": [broker_container()],
        "volumes": volumes,
    }


def get(plane: Any, path: str) -> dict[str, Any]:
    status, obj = plane.api("GET", path)
    assert status == 200, (path, obj)
    return obj


def ready_pod(plane: Any, ns: str, name: str, not_uid: str = "") -> dict[str, Any]:
    """The Pod once Ready (and, after a delete, once it is a new Pod)."""

    def probe() -> dict[str, Any] | None:
        status, pod = plane.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        if status != 200 or pod["metadata"]["uid"] == not_uid:
            return None
        conditions = pod.get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return pod if ready else None

    pod: dict[str, Any] = wait_for(f"Pod {ns}/{name} Ready", probe)
    return pod


def container_cgroup(plane: Any, pod: dict[str, Any], controller: str) -> Path:
    """The container's own cgroup dir under the node's cgroup root, by the Pod's QoS class
    (the kubelet's layout: ``kubepods/[burstable|besteffort/]pod<uid>/<container>``). Named,
    not globbed: a walk of kubepods/ meets an earlier test's Pod cgroups as the kubelet removes
    them, and Python's ``**`` raises on a directory gone between its listing and its descent."""
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    root = Path("/sys/fs/cgroup", controller, plane.node_layout.cgroup_name)
    qos = pod["status"]["qosClass"]
    tier = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}[qos]
    found = root / f"kubepods/{tier}pod{pod['metadata']['uid']}" / container_id
    assert found.is_dir(), (qos, found)
    return found


def cluster_ip(plane: Any, ns: str, service: str) -> str:
    """The Service's ClusterIP: from the host it routes onto the bridge, kube-proxy DNATs it."""
    ip: str = get(plane, f"/api/v1/namespaces/{ns}/services/{service}")["spec"]["clusterIP"]
    assert ip.startswith("10.0.0."), ip
    return ip


def service_endpoint(plane: Any, ns: str, service: str) -> str:
    """A ready address of the Service's EndpointSlice."""

    def probe() -> str | None:
        path = f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
        path += f"?labelSelector=kubernetes.io/service-name={service}"
        for item in get(plane, path)["items"]:
            for endpoint in item.get("endpoints") or []:
                if endpoint.get("conditions", {}).get("ready"):
                    return str(endpoint["addresses"][0])
        return None

    address: str = wait_for(f"a ready endpoint of Service {ns}/{service}", probe)
    return address


def connect(host: str) -> pika.BlockingConnection:
    credentials = pika.PlainCredentials(USER, PASSWORD)
    params = pika.ConnectionParameters(
        host, 5672, credentials=credentials, connection_attempts=10, retry_delay=1
    )
    return pika.BlockingConnection(params)


def publish_confirmed(host: str, queue: str, bodies: list[bytes]) -> None:
    """Persistent messages to a durable queue, each confirmed by the broker."""
    with connect(host) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))


def drain(host: str, queue: str) -> list[bytes]:
    """Everything in the queue, acked."""
    got = []
    with connect(host) as conn:
        channel = conn.channel()
        while True:
            method, _props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            got.append(body)


def create_service(plane: Any, ns: str, name: str) -> None:
    plane.create(
        f"/api/v1/namespaces/{ns}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"selector": LABELS, "ports": [{"name": "amqp", "port": 5672}]},
        },
    )


def test_broker_pod_is_ready_in_its_memory_cgroup_and_serves_amqp(node, k8s_namespace):
    ns = k8s_namespace
    pod_body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "broker", "labels": LABELS},
        "spec": pod_spec({"name": "data", "emptyDir": {}}),
    }
    node.create(f"/api/v1/namespaces/{ns}/pods", pod_body)
    create_service(node, ns, "broker")
    pod = ready_pod(node, ns, "broker")

    assert pod["spec"]["nodeName"] == "hutch-node"
    assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    memory = container_cgroup(node, pod, "memory")
    assert int((memory / "memory.limit_in_bytes").read_text()) == LIMIT_BYTES
    # The broker process itself sits in that cgroup, not just the container's record of it.
    pids = (memory / "cgroup.procs").read_text().split()
    assert pids, memory
    argv = Path(f"/proc/{pids[0]}/cmdline").read_bytes().split(b"\0")
    assert any(b"hutch-broker" in arg for arg in argv), argv
    # The Dockerfile's promises: uid 1000, a read-only root filesystem.
    assert node.kubectl("exec", "-n", ns, "broker", "--", "id", "-u").stdout.strip() == "1000"
    touch = node.kubectl("exec", "-n", ns, "broker", "--", "touch", "/x", check=False)
    assert "Read-only file system" in touch.stderr
    # The image's build stage compiled the broker's C extensions, and they load in the image.
    native = node.kubectl(
        "exec", "-n", ns, "broker", "--", "python3", "-c",
        "from hutch_broker.store import records; from hutch_broker.protocol import contentscan;"
        "print(records.NATIVE_RUNS, contentscan.NATIVE is not None)",
    )  # fmt: skip
    assert native.stdout.strip() == "True True", native

    assert service_endpoint(node, ns, "broker") == pod["status"]["podIP"]
    host = cluster_ip(node, ns, "broker")
    publish_confirmed(host, "round-trip", [b"hello from the host"])
    assert drain(host, "round-trip") == [b"hello from the host"]


def test_the_image_store_kept_images_but_no_container_of_an_earlier_run(node, k8s_namespace):
    """containerd's root is the image store under the cache (hutch_localkube.imagestore):
    it keeps one version of each image between node starts, while every container record in
    it, Pod sandboxes included, was made after this node started."""
    ns = k8s_namespace
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "broker", "labels": LABELS},
            "spec": pod_spec({"name": "data", "emptyDir": {}})}  # fmt: skip
    node.create(f"/api/v1/namespaces/{ns}/pods", body)
    ready_pod(node, ns, "broker")
    config = (node.run_dir / "containerd.toml").read_text()
    assert f'root = "{imagestore.root_dir(realnode.CONTAINERD)}"' in config
    stored = imagestore.parse_images(node.ctr("images", "ls").stdout)
    assert IMAGE in stored
    # The CRI plugin's references by image ID name only images some name holds: an ID left
    # pointing at an old version would keep its layers in the store for good.
    named = {digest for ref, digest in stored.items() if not imagestore.is_id_reference(ref)}
    orphans = {ref for ref, digest in stored.items() if digest not in named}
    assert orphans == set(), stored
    ids = node.ctr("containers", "ls", "-q").stdout.split()
    ours = 0  # this test's Pod: its sandbox and its container
    for cid in ids:
        shown = node.ctr("containers", "info", cid)
        if shown.returncode != 0 and "not found" in shown.stderr:
            # Removed since the listing: the kubelet cleans up earlier tests' Pods meanwhile
            # (a fresh-clone CI of 149501b read one such container's empty info as JSON).
            continue
        assert shown.returncode == 0, (cid, shown.stderr)
        info = json.loads(shown.stdout)
        labels = info.get("Labels") or {}
        stamp = re.sub(r"(\.\d{6})\d*", r"\1", info["CreatedAt"]).replace("Z", "+00:00")
        created = datetime.datetime.fromisoformat(stamp).timestamp()
        assert created >= node.started_at, (cid, labels.get("io.kubernetes.pod.name"))
        pod = (labels.get("io.kubernetes.pod.namespace"), labels.get("io.kubernetes.pod.name"))
        ours += pod == (ns, "broker")
    assert ours >= 2, ids


def statefulset(name: str) -> dict[str, Any]:
    """One broker replica with a PVC of the node tier's local-PV class."""
    claim = {
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "hutch-test",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": LABELS},
            "template": {"metadata": {"labels": LABELS}, "spec": pod_spec(None)},
            "volumeClaimTemplates": [claim],
        },
    }


def test_statefulset_pod_keeps_confirmed_messages_across_kubectl_delete_pod(
    node, k8s_namespace, make_local_pvs
):
    ns = k8s_namespace
    (pv,) = make_local_pvs(1)
    node.create(f"/apis/apps/v1/namespaces/{ns}/statefulsets", statefulset("hutch"))
    create_service(node, ns, "hutch")
    first = ready_pod(node, ns, "hutch-0")
    claim = get(node, f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data-hutch-0")
    assert claim["spec"]["volumeName"] == pv

    bodies = [json.dumps({"n": i}).encode() for i in range(200)]
    host = cluster_ip(node, ns, "hutch")
    publish_confirmed(host, "durable", bodies)
    node.kubectl("delete", "pod", "-n", ns, "hutch-0", "--wait=true")

    second = ready_pod(node, ns, "hutch-0", not_uid=first["metadata"]["uid"])
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in second["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["data-hutch-0"]
    assert drain(host, "durable") == bodies
    # The data really lives on the PV's directory on the node's disk, owned via fsGroup.
    pv_dir = Path(get(node, f"/api/v1/persistentvolumes/{pv}")["spec"]["local"]["path"])
    assert any(pv_dir.iterdir()), pv_dir
    assert pv_dir.stat().st_gid == 1000
