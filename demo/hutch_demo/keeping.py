"""``make run ARGS=--keep``: a kept run stays usable while its broker Pods come and go.

Why: a ``kubectl port-forward`` is bound to the one Pod it found at start. Deleting or rolling
the broker Pod (a resources change rolls it) ended the forward at the next connection, and the
quickstart took that as its end: it stopped the whole plane and removed its directory (every
Broker, volume and Parquet output the user had made), printing nothing (issue 31 item 4).

Now ``Follower.check``, called every second while the run is kept, compares each Broker's Pod
with the one its forward was started for. When the Pod is gone, replaced or the forward has
exited, it says so, stops the old forward and, once the new Pod is Ready, starts a new one on
the same loopback ports, so the printed URIs keep working. The plane is never stopped for it. A
plane component that exits (kubelet, containerd, ...) is reported with its log, once; only
Ctrl-C (or SIGTERM) ends a kept run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hutch_demo import chain, clusters, launchers, pods

FORWARD_TIMEOUT = 30  # seconds for a new forward to answer AMQP once its Pod is Ready


@dataclass
class Follower:
    """Keeps each started Broker's port-forward on its current Pod; ``say`` reports."""

    line: chain.Chain
    say: Callable[[str], None]
    waiting: dict[str, str] = field(default_factory=dict)  # broker -> why, said once
    dead: set[str] = field(default_factory=set)  # plane components reported as exited
    problems: dict[str, str] = field(default_factory=dict)  # broker -> API problem, said once
    forwards: int = 0  # forwards re-established, for the summary at exit

    def check(self) -> None:
        """One look at every Broker's Pod and forward, and at the plane's processes. An API
        that does not answer (the plane's apiserver gone) is said once, never raised: only
        Ctrl-C ends a kept run."""
        for handle in self.line.started:
            try:
                self._follow(handle)
            except (clusters.ClusterError, OSError, subprocess.SubprocessError) as exc:
                problem = f"cannot look at Pod {handle.pod_name}: {exc}"
                if self.problems.get(handle.name) != problem:
                    self.problems[handle.name] = problem
                    self.say(f"{problem}; trying again every second")
            else:
                self.problems.pop(handle.name, None)
        self._watch_plane()

    def _follow(self, handle: chain.BrokerHandle) -> None:
        cluster, namespace = self.line.cluster, self.line.namespace
        pod = pods.get_pod(cluster, namespace, handle.pod_name)
        live = pod is not None and not pod["metadata"].get("deletionTimestamp")
        uid = pod["metadata"]["uid"] if pod is not None and live else None
        forward = handle.port_forward
        running = forward is not None and forward.running
        if running and uid == handle.pod_uid:
            return
        if handle.name not in self.waiting:
            why = _why(handle, forward, running, uid)
            self.waiting[handle.name] = why
            self.say(
                f"{why}; the plane and everything on it keep running. Forwarding "
                f"127.0.0.1:{handle.endpoint.amqp_port} again once the new Pod is Ready."
            )
        if forward is not None:
            forward.stop(grace=2)  # bound to a Pod that is gone: free the ports for the next
            handle.port_forward = None
        if uid is None or not pods.is_ready(pod):
            return
        self._forward(handle, uid)

    def _forward(self, handle: chain.BrokerHandle, uid: str) -> None:
        log_path = self.line.logs / f"port-forward-{handle.name}.log"
        try:
            child = launchers.start_port_forward(
                self.line.cluster, self.line.namespace, handle.name, handle.endpoint, log_path,
                timeout=FORWARD_TIMEOUT,
            )  # fmt: skip
        except clusters.ClusterError as exc:
            self.say(f"port-forward to {handle.pod_name} not up yet ({exc}); trying again")
            return
        handle.port_forward, handle.pod_uid = child, uid
        self.line.remember(f"port-forward-{handle.name}", child.pid)
        self.waiting.pop(handle.name, None)
        self.forwards += 1
        self.say(
            f"port-forward re-established to Pod {handle.pod_name} (uid {uid[:8]}): "
            f"{handle.endpoint.http_url}, AMQP port {handle.endpoint.amqp_port}"
        )

    def _watch_plane(self) -> None:
        plane = self.line.cluster.plane
        if plane is None:
            return
        for component in plane.components:
            code = component.proc.poll()
            if code is None or component.name in self.dead:
                continue
            self.dead.add(component.name)
            alive = [c.name for c in plane.components if c.proc.poll() is None]
            self.say(
                f"plane component {component.name} exited with {code} (its log: "
                f"{plane.logs / (component.name + '.log')}); still running: "
                f"{', '.join(alive) or 'nothing'}. Nothing is stopped or removed until Ctrl-C."
            )


def _why(
    handle: chain.BrokerHandle, forward: launchers.Child | None, running: bool, uid: str | None
) -> str:
    """Why a Broker's forward has to be started again, in the user's words."""
    if forward is not None and not running:
        tail = forward.log_tail(lines=3).strip().splitlines()
        last = f": {tail[-1]}" if tail else ""
        return f"port-forward to Pod {handle.pod_name} exited ({forward.proc.returncode}){last}"
    if uid is None:
        return f"Pod {handle.pod_name} is gone or terminating"
    return f"Pod {handle.pod_name} was replaced (uid {uid[:8]})"


def cluster_facts(cluster: clusters.Cluster) -> dict[str, Any]:
    """The kubectl the run uses and the API server URL (Spark's ``--master k8s://<url>``)."""
    if cluster.plane is not None:
        server = cluster.plane.server
    else:
        view = cluster.kubectl("config", "view", "--minify", "-o",
                               "jsonpath={.clusters[0].cluster.server}", check=False)  # fmt: skip
        server = view.stdout.strip() or "(see the kubeconfig)"
    return {"kubectl": str(cluster.kubectl_path), "server": server}
