"""Cluster DNS on the real node: CoreDNS on the bridge, Pods resolve Services by name (issue 12).

Without cluster DNS a Pod has the machine's resolv.conf, `<svc>.<ns>.svc` does not resolve and the
operator cannot reach `<broker>.<ns>.svc`. These tests resolve names from inside a real Pod through
glibc (the path every client takes), check what the Pod's resolv.conf says, and check from the
host that CoreDNS is bound to the bridge address only, answers names outside the cluster at once
(REFUSED: it has no upstream) and runs with its own narrow identity. docs/real-node.md.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hutch_localkube import realnode

pytestmark = pytest.mark.k8s
log = logging.getLogger("hutch.k8s.dns")


IMAGE = "localhost/hutch/hutch-broker:0.1.0"
LABELS = {"app": "dns-broker"}
KUBERNETES_IP = "10.0.0.1"  # the first address of the Service CIDR: Service default/kubernetes
OUTSIDE = "pypi.org"
SEARCH_TAIL = [("svc.cluster.local.", "NXDOMAIN"), ("cluster.local.", "NXDOMAIN")]
NOERROR, NXDOMAIN, REFUSED = 0, 3, 5

# Runs in the client Pod: getaddrinfo (glibc, the Pod's resolv.conf) for each name, timed.
RESOLVE = """
import json, socket, sys, time
out = {}
for name in sys.argv[1:]:
    began = time.monotonic()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
        out[name] = {"ips": sorted({i[4][0] for i in infos})}
    except socket.gaierror as exc:
        out[name] = {"error": str(exc)}
    out[name]["seconds"] = round(time.monotonic() - began, 3)
print(json.dumps(out))
"""
# Runs in the client Pod: an AMQP 0-9-1 handshake by name; the broker answers Connection.Start.
AMQP_BY_NAME = """
import socket, sys
with socket.create_connection((sys.argv[1], 5672), timeout=10) as sock:
    sock.sendall(b"AMQP\\x00\\x00\\x09\\x01")
    frame, peer = sock.recv(7), sock.getpeername()[0]
print(frame[0], int.from_bytes(frame[1:3], "big"), peer)
"""
SLEEP = "import signal, time; signal.signal(signal.SIGTERM, lambda *_: exit(0)); time.sleep(86400)"


def wait_for(what: str, probe: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result:
            return result
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def get(plane: Any, path: str) -> dict[str, Any]:
    status, obj = plane.api("GET", path)
    assert status == 200, (path, obj)
    return obj


def ready_pod(plane: Any, ns: str, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status, pod = plane.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        conditions = pod.get("status", {}).get("conditions", []) if status == 200 else []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return pod if ready else None

    pod: dict[str, Any] = wait_for(f"Pod {ns}/{name} Ready", probe)
    return pod


def container(name: str, command: list[str] | None, probe: bool) -> dict[str, Any]:
    """The broker image, restricted as the operator runs it; `command` replaces its entrypoint."""
    spec: dict[str, Any] = {
        "name": name,
        "image": IMAGE,
        "imagePullPolicy": "Never",
        "env": [
            {"name": "HUTCH_DEFAULT_USER", "value": "hutch"},
            {"name": "HUTCH_DEFAULT_PASS", "value": "hutch"},
        ],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
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
    if command:
        spec["command"] = command
    if probe:
        spec["ports"] = [{"name": "amqp", "containerPort": 5672}]
        spec["readinessProbe"] = {"tcpSocket": {"port": "amqp"}, "periodSeconds": 1}
    return spec


def pod_spec(main: dict[str, Any]) -> dict[str, Any]:
    return {
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 2,
        "containers": [main],
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
    }


def service(name: str, headless: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": LABELS, "ports": [{"name": "amqp", "port": 5672}]}
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def statefulset(name: str, service_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "serviceName": service_name,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": pod_spec(container("hutch-broker", None, probe=True)),
            },
        },
    }


def in_pod(plane: Any, ns: str, pod: str, script: str, *args: str) -> str:
    result = plane.kubectl("exec", "-n", ns, pod, "--", "python3", "-c", script, *args)
    return str(result.stdout)


def forward_drops() -> int:
    """Packets the node's FORWARD rule dropped (anything from the bridge bound off the bridge)."""
    listed = subprocess.run(
        ["iptables", "-L", "FORWARD", "-v", "-x", "-n"], capture_output=True, text=True, check=True
    ).stdout
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[2] == "DROP" and fields[5] == realnode.BRIDGE:
            return int(fields[0])
    raise AssertionError(f"no FORWARD DROP rule for {realnode.BRIDGE}:\n{listed}")


def coredns_log(plane: Any) -> str:
    return Path(plane.logs / "coredns.log").read_text(errors="replace")


def test_coredns_serves_the_cluster_zones_on_the_bridge_only(node):
    """From the host: names, reverse names, rcodes, sockets and CoreDNS's RBAC identity."""
    name = "kubernetes.default.svc.cluster.local"
    assert realnode.dns_query(name).answers == [KUBERNETES_IP]
    assert realnode.dns_query(name, tcp=True).answers == [KUBERNETES_IP]
    ptr = realnode.dns_query("1.0.0.10.in-addr.arpa", "PTR")
    assert (ptr.rcode, ptr.answers) == (NOERROR, [name + "."])
    assert realnode.dns_query("nope.default.svc.cluster.local").rcode == NXDOMAIN
    # Outside the cluster's zones: REFUSED at once, from the server itself (no upstream).
    for query, qtype in ((OUTSIDE, "A"), ("8.8.8.8.in-addr.arpa", "PTR")):
        began = time.monotonic()
        reply = realnode.dns_query(query, qtype)
        took = time.monotonic() - began
        log.info(
            "host: %s %s: %s in %.1f ms", qtype, query, realnode.RCODES[reply.rcode], took * 1e3
        )
        assert reply.rcode == REFUSED, (query, reply)
        assert took < 0.5

    # Bound to 10.246.0.1:53 (UDP and TCP), never to the machine's wildcard or loopback :53.
    (coredns,) = [c for c in node.components if c.name == "coredns"]
    sockets = subprocess.run(
        ["ss", "-H", "-lntup"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    ours = [line.split() for line in sockets if f"pid={coredns.proc.pid}," in line]
    dns = sorted((fields[0], fields[4]) for fields in ours if fields[4].endswith(":53"))
    assert dns == [("tcp", "10.246.0.1:53"), ("udp", "10.246.0.1:53")], ours
    assert all(fields[4].startswith(("10.246.0.1:", "127.0.0.1:")) for fields in ours), ours

    # Its own identity (client cert CN system:coredns), with kubeadm's read-only rights.
    def can(verb: str, resource: str) -> str:
        args = ("auth", "can-i", verb, resource, "--all-namespaces", "--as=system:coredns")
        return str(node.kubectl(*args, check=False).stdout.strip())

    assert can("watch", "endpointslices.discovery.k8s.io") == "yes"
    assert can("list", "services") == "yes"
    assert can("get", "secrets") == "no"
    assert can("create", "services") == "no"
    assert not re.search(r"forbidden|Failed to watch", coredns_log(node)), coredns_log(node)
    # Nothing in the binary could forward a query (build-binaries.sh's smoke check, again).
    plugins = subprocess.run(
        [coredns.exe, "-plugins"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "kubernetes" in plugins
    assert not {"forward", "grpc"} & set(plugins), plugins


def test_pods_resolve_services_and_statefulset_pods_but_nothing_outside(node, k8s_namespace):
    """From inside a real Pod, through glibc and the resolv.conf kubelet wrote for it."""
    ns = k8s_namespace
    node.create(f"/api/v1/namespaces/{ns}/services", service("broker", headless=False))
    node.create(f"/api/v1/namespaces/{ns}/services", service("hutch", headless=True))
    node.create(f"/apis/apps/v1/namespaces/{ns}/statefulsets", statefulset("hutch", "hutch"))
    client = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "client"},
        "spec": pod_spec(container("client", ["python3", "-c", SLEEP], probe=False)),
    }
    node.create(f"/api/v1/namespaces/{ns}/pods", client)
    broker = ready_pod(node, ns, "hutch-0")
    ready_pod(node, ns, "client")
    pod_ip = broker["status"]["podIP"]
    broker_ip = get(node, f"/api/v1/namespaces/{ns}/services/broker")["spec"]["clusterIP"]
    kubernetes_ip = get(node, "/api/v1/namespaces/default/services/kubernetes")["spec"]
    assert kubernetes_ip["clusterIP"] == KUBERNETES_IP

    resolv = node.kubectl("exec", "-n", ns, "client", "--", "cat", "/etc/resolv.conf").stdout
    assert resolv.split("\n")[:3] == [
        f"search {ns}.svc.cluster.local svc.cluster.local cluster.local",
        "nameserver 10.246.0.1",
        "options ndots:5",
    ], resolv

    # The headless Service's record needs the EndpointSlice of the Ready Pod (hostname hutch-0).
    def headless_ready() -> bool:
        return realnode.dns_query(f"hutch.{ns}.svc.cluster.local").answers == [pod_ip]

    wait_for("the headless Service's A record", headless_ready, 30)
    names = {
        "kubernetes.default.svc": [KUBERNETES_IP],
        "kubernetes.default": [KUBERNETES_IP],
        f"broker.{ns}.svc": [broker_ip],
        "broker": [broker_ip],  # the Pod's own namespace, through the search list
        f"hutch.{ns}.svc": [pod_ip],  # headless: the Pods' IPs
        f"hutch-0.hutch.{ns}.svc.cluster.local": [pod_ip],  # a StatefulSet Pod's stable name
        f"hutch-0.hutch.{ns}.svc": [pod_ip],
    }
    drops_before = forward_drops()
    resolved = json.loads(in_pod(node, ns, "client", RESOLVE, *names, OUTSIDE))
    drops_after = forward_drops()
    for name, ips in names.items():
        assert resolved[name].get("ips") == ips, (name, resolved[name])
    # Outside the cluster: a fast failure, and no packet left the bridge. glibc walks the search
    # list (NXDOMAIN from CoreDNS's log below), then asks for pypi.org. itself: REFUSED, which
    # CoreDNS answers before any plugin runs (so `log` does not show it; the host test does).
    outside = resolved[OUTSIDE]
    log.info("pod: getaddrinfo %s: %s", OUTSIDE, outside)
    assert "ips" not in outside, outside
    assert outside["seconds"] < 2, outside
    assert drops_after == drops_before
    asked = re.findall(rf'"A IN {re.escape(OUTSIDE)}\.(\S*) .*" (\w+) ', coredns_log(node))
    assert asked == [(f"{ns}.svc.cluster.local.", "NXDOMAIN"), *SEARCH_TAIL], asked

    # A connection by name: AMQP's handshake to the broker through its Service's ClusterIP.
    frame_type, channel, peer = in_pod(node, ns, "client", AMQP_BY_NAME, "broker").split()
    assert (frame_type, channel, peer) == ("1", "0", broker_ip)

    # kubelet no longer warns that the cluster has no DNS.
    events = get(node, "/api/v1/events?fieldSelector=reason%3DMissingClusterDNS")["items"]
    assert events == []
    assert "MissingClusterDNS" not in Path(node.logs / "kubelet.log").read_text(errors="replace")
