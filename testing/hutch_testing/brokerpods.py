"""A Broker's Pod on the node tier's real node, seen from the host (docs/real-node.md).

Why: tests that must fail if the Pods were fake need what only a real container has: its
memory cgroup under the node's cgroup root (the limit the kubelet set, the kernel's OOM-kill
count), its processes (to ``kill -9`` the broker from outside: the broker is PID 1 of its PID
namespace, which ignores a SIGKILL sent from inside), and the kubelet's record of it
(``restartCount``, ``lastState``). Clients reach the broker through its Service's ClusterIP,
which routes from the host through kube-proxy and so follows the Pod when it is replaced.

``plane`` is the node tier's ``Plane`` (hutch_localkube.planes): ``api``, ``node_layout``.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
from hutch_demo import probes, waiting

if TYPE_CHECKING:  # typing only: the plane package is heavy to import
    from hutch_localkube.planes import Plane

CGROUP_ROOT = Path("/sys/fs/cgroup")
ADDRESSES = "HUTCH_BROKER_ADDRESSES"
READY_TIMEOUT = 180.0
ROUTE_TIMEOUT = 60.0


@dataclass
class BrokerPod:
    """Broker ``name`` in ``namespace`` and its Pod ``<name>-server-0``."""

    plane: Plane
    namespace: str
    name: str
    host: str = ""  # the Service's ClusterIP
    user: str = ""
    password: str = ""
    pod: dict[str, Any] = field(default_factory=dict)  # as last seen Ready

    @property
    def pod_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}-server-0"

    def get(self, path: str) -> dict[str, Any]:
        status, obj = self.plane.api("GET", path)
        if status != 200:
            raise AssertionError(f"GET {path} -> {status}: {obj}")
        return obj

    def attach(self) -> BrokerPod:
        """Waits for the Pod, learns the Service IP and the default user's credentials, points
        the in-process operator at that IP (the host does not resolve cluster names), and waits
        until the ClusterIP routes to the broker."""
        self.wait_ready()
        ns = f"/api/v1/namespaces/{self.namespace}"
        self.host = self.get(f"{ns}/services/{self.name}")["spec"]["clusterIP"]
        secret = self.get(f"{ns}/secrets/{self.name}-default-user")["data"]
        self.user, self.password = (
            base64.b64decode(secret[key]).decode() for key in ("username", "password")
        )
        entries = [e for e in os.environ.get(ADDRESSES, "").split(",") if e]
        entries.append(f"{self.namespace}/{self.name}={self.http}|amqp://{self.host}:5672")
        os.environ[ADDRESSES] = ",".join(entries)
        self.wait_routed()
        return self

    def wait_routed(self, timeout: float = ROUTE_TIMEOUT) -> None:
        """Until the broker answers AMQP on the ClusterIP (AMQPS when the Broker serves TLS
        only, as ``spec.tls.disableNonTLSListeners`` makes it).

        A Ready Pod is not yet a routed Service: the EndpointSlice controller must list the
        Pod as ready and kube-proxy must write its rule, and until then kube-proxy rejects the
        ClusterIP ("connection refused"), as a Service without endpoints. A client of a new
        Broker retries; this waits the same way, and says where the route stopped if it never
        comes.
        """

        service = self.get(f"/api/v1/namespaces/{self.namespace}/services/{self.name}")
        ports = {p.get("port") for p in service["spec"].get("ports", [])}

        def accepts() -> bool:
            if 5672 in ports:
                return probes.amqp_answers(self.host, 5672)
            return probes.tls_answers(self.host, 5671)

        try:
            waiting.wait_for(accepts, timeout=timeout, interval=0.2, what="the ClusterIP")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.route_report()}") from exc

    def route_report(self) -> str:
        """The EndpointSlices of the Service and kube-proxy's rules for its ClusterIP."""
        path = f"/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices"
        _status, slices = self.plane.api(
            "GET", f"{path}?labelSelector=kubernetes.io/service-name={self.name}"
        )
        endpoints = [
            (e.get("addresses"), e.get("conditions"))
            for s in (slices or {}).get("items", [])
            for e in s.get("endpoints") or []
        ]
        nft = subprocess.run(
            ["/usr/sbin/nft", "list", "table", "ip", "kube-proxy"],
            capture_output=True,
            text=True,
            check=False,
        )
        rules = [line.strip() for line in nft.stdout.splitlines() if self.host in line]
        return (
            f"Service {self.namespace}/{self.name} ClusterIP {self.host}, Pod IP "
            f"{self.pod.get('status', {}).get('podIP')}\nendpoints: {endpoints}\n"
            f"kube-proxy rules naming the ClusterIP: {rules or nft.stderr.strip()}"
        )

    @property
    def http(self) -> str:
        return f"http://{self.host}:15672"

    # -- the kubelet's view ----------------------------------------------------------------

    def current(self) -> dict[str, Any]:
        status, pod = self.plane.api("GET", self.pod_path)
        return pod if status == 200 else {}

    def container_status(self) -> dict[str, Any]:
        statuses = self.current().get("status", {}).get("containerStatuses") or [{}]
        return dict(statuses[0])

    def wait_ready(self, *, not_uid: str = "", restarts: int = 0) -> dict[str, Any]:
        """The Pod once its container is Ready: a new Pod when ``not_uid`` is given, and a
        container restarted at least ``restarts`` times."""

        def ready() -> dict[str, Any] | None:
            pod = self.current()
            if not pod or pod["metadata"]["uid"] == not_uid:
                return None
            statuses = pod.get("status", {}).get("containerStatuses") or [{}]
            if statuses[0].get("restartCount", 0) < restarts or not statuses[0].get("ready"):
                return None
            return pod

        self.pod = waiting.wait_for(
            ready, timeout=READY_TIMEOUT, interval=0.2, what=f"{self.pod_path} Ready"
        )
        return self.pod

    # -- the host's view ----------------------------------------------------------------------

    def pod_cgroup(self, controller: str = "memory") -> Path:
        """The Pod's cgroup under the node's cgroup root: it outlives container restarts."""
        root = CGROUP_ROOT / controller / self.plane.node_layout.cgroup_name
        (found,) = root.glob(f"kubepods/**/pod{self.pod['metadata']['uid']}")
        return found

    def cgroup(self, controller: str = "memory") -> Path:
        """The broker container's own cgroup (the running container of ``self.pod``)."""
        container_id: str = self.pod["status"]["containerStatuses"][0]["containerID"]
        return self.pod_cgroup(controller) / container_id.split("://", 1)[1]

    def kill_broker(self) -> list[int]:
        """SIGKILL, from the host, to every process in the container's cgroup."""
        pids = [int(pid) for pid in (self.cgroup() / "cgroup.procs").read_text().split()]
        if not pids:
            raise AssertionError(f"no process in {self.cgroup()}")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    # -- the broker's view ----------------------------------------------------------------------

    @property
    def pod_ip(self) -> str:
        return str(self.pod["status"]["podIP"])

    def connect(self, host: str = "") -> pika.BlockingConnection:
        """A blocking pika connection to the Service's ClusterIP, or to ``host``."""
        params = pika.ConnectionParameters(
            host or self.host,
            5672,
            credentials=pika.PlainCredentials(self.user, self.password),
            connection_attempts=30,
            retry_delay=1,
            blocked_connection_timeout=None,
        )
        return pika.BlockingConnection(params)

    def management(self, path: str) -> Any:
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request = urllib.request.Request(  # noqa: S310 - a Service on the node's bridge
            self.http + path, headers={"Authorization": f"Basic {token}"}
        )
        with urllib.request.urlopen(request, timeout=5) as reply:  # noqa: S310
            return json.loads(reply.read())

    def node_info(self) -> dict[str, Any]:
        (info,) = self.management("/api/nodes")
        return dict(info)


def oom_kills(cgroup: Path) -> int:
    """The kernel's count of OOM kills in a v1 memory cgroup (and, hierarchically, below)."""
    for line in (cgroup / "memory.oom_control").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    raise AssertionError(f"no oom_kill line in {cgroup}/memory.oom_control")
