"""The Hutch chain as steps: CRDs, namespace, operator, Brokers, their brokers, topology, jobs.

Why one class for the quickstart and the e2e suite: both must drive the same chain, and the
e2e suite is only worth its minutes if it checks what the quickstart shows. A ``Chain`` owns
one namespace on one cluster, one operator process watching it, and the Brokers named at
construction (the operator's broker addresses are fixed when it starts). Each step is a method;
``stop()`` stops every process the chain started, newest first.

Brokers: on the local plane each Broker's broker is a local process started with the config
the operator rendered (``restart_broker`` re-reads it after a spec change, as the Pod would be
rolled by its config hash); on an external cluster it is the real Pod behind a port-forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hutch_testing import brokers, clusters, launchers, management, pipeline

EXAMPLES = clusters.REPO_ROOT / "examples"
CRDS = clusters.REPO_ROOT / "crds"
TOPOLOGY_PLURALS = ["exchanges", "queues", "bindings", "policies", "operatorpolicies"]


@dataclass
class BrokerHandle:
    """One Broker CR and what serves it here."""

    name: str
    endpoint: launchers.Endpoint = field(default_factory=launchers.Endpoint.allocate)
    rendered: launchers.Rendered | None = None
    process: brokers.HutchBroker | None = None
    port_forward: launchers.Child | None = None


@dataclass
class Chain:
    """One namespace, one operator and its Brokers on a cluster, with the processes behind."""

    cluster: clusters.Cluster
    namespace: str
    work_dir: Path
    broker_names: tuple[str, ...] = ("hutch",)
    brokers: dict[str, BrokerHandle] = field(default_factory=dict)
    operator: launchers.Child | None = None
    jobs: list[launchers.Child] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in self.broker_names:
            self.brokers.setdefault(name, BrokerHandle(name))

    @property
    def main(self) -> BrokerHandle:
        return self.brokers[self.broker_names[0]]

    @property
    def endpoint(self) -> launchers.Endpoint:
        """The first Broker's loopback endpoint (the quickstart's only one)."""
        return self.main.endpoint

    @property
    def logs(self) -> Path:
        return self.work_dir / "logs"

    @property
    def run_dir(self) -> Path | None:
        """The plane's run dir, whose ``pids`` file also lists our children (stale reaping)."""
        return Path(self.cluster.plane.run_dir) if self.cluster.plane is not None else None

    def remember(self, role: str, pid: int | None) -> None:
        if pid is not None:
            launchers.record_pid(self.run_dir, f"chain-{role}", pid)

    # -- cluster and operator ----------------------------------------------------------------

    def apply_crds(self) -> None:
        if self.cluster.plane is not None:
            self.cluster.plane.apply_crds(CRDS)
            return
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
        self.cluster.kubectl("wait", "--for=condition=Established", "-f", str(CRDS))

    def create_namespace(self, volumes: list[str] | None = None) -> None:
        """The namespace; on the local plane also PVs for the Brokers' volumes (2Gi each)."""
        self.cluster.create_namespace(self.namespace)
        if self.cluster.local:
            sizes = volumes if volumes is not None else ["2Gi"] * len(self.broker_names)
            clusters.prepare_local_storage(self.cluster, sizes)

    def start_operator(self) -> None:
        settings = launchers.OperatorSettings(
            namespaces=[self.namespace],
            addresses={(self.namespace, h.name): h.endpoint for h in self.brokers.values()},
        )
        self.operator = launchers.start_operator(
            self.cluster.kubeconfig, settings, self.logs / "operator.log"
        )
        self.remember("operator", self.operator.pid)

    # -- brokers -----------------------------------------------------------------------------

    def create_broker(
        self, manifest: Path | str = EXAMPLES / "broker.yaml", name: str | None = None
    ) -> launchers.Rendered:
        """Applies a Broker; returns the config and user the operator rendered for it."""
        handle = self.brokers[name or self.broker_names[0]]
        self.cluster.apply(self.namespace, manifest)
        handle.rendered = launchers.read_rendered(self.cluster, self.namespace, handle.name)
        handle.endpoint.username = handle.rendered.username
        handle.endpoint.password = handle.rendered.password
        return handle.rendered

    def start_broker(self, name: str | None = None, *, timeout: float = 60) -> None:
        """Local plane: the broker process; external: port-forward to the real Pod."""
        handle = self.brokers[name or self.broker_names[0]]
        if handle.rendered is None:
            raise clusters.ClusterError("create_broker() must run before start_broker()")
        if self.cluster.local:
            work_dir = self.work_dir / "brokers" / f"{self.namespace}-{handle.name}-0"
            handle.process = launchers.start_local_broker(
                handle.rendered, handle.endpoint, work_dir, f"{handle.name}-default-user"
            )
            self.remember(f"broker-{handle.name}", handle.process.pid)
        else:
            self.wait_broker("Ready", handle.name, timeout=300)
            handle.port_forward = launchers.start_port_forward(
                self.cluster,
                self.namespace,
                handle.name,
                handle.endpoint,
                self.logs / f"port-forward-{handle.name}.log",
            )
            self.remember(f"port-forward-{handle.name}", handle.port_forward.pid)
        self.wait_broker("Available", handle.name, timeout=timeout)
        self.wait_broker("Ready", handle.name, timeout=timeout)

    def restart_broker(self, name: str, *, timeout: float = 120) -> launchers.Rendered:
        """After a Broker spec change: wait for the new rendering and serve it (the Pod roll)."""
        handle = self.brokers[name]
        old = handle.rendered.config if handle.rendered else None
        handle.rendered = clusters.wait_for(
            lambda: self._changed_rendering(handle.name, old),
            f"ConfigMap {handle.name}-config re-rendered",
            timeout=timeout,
        )
        self.stop_broker(name)
        if not self.cluster.local:
            self.cluster.kubectl(
                "rollout", "status", "-n", self.namespace,
                f"statefulset/{handle.name}-server", f"--timeout={int(timeout)}s",
            )  # fmt: skip
        self.start_broker(name, timeout=timeout)
        return handle.rendered

    def _changed_rendering(self, name: str, old: str | None) -> launchers.Rendered | None:
        rendered = launchers.read_rendered(self.cluster, self.namespace, name)
        return rendered if rendered.config != old else None

    def stop_broker(self, name: str) -> None:
        handle = self.brokers[name]
        if handle.process is not None:
            handle.process.stop(keep_files=True)
            handle.process = None
        if handle.port_forward is not None:
            handle.port_forward.stop(grace=2)
            handle.port_forward = None

    def wait_broker(
        self, condition: str, name: str | None = None, *, timeout: float
    ) -> dict[str, Any]:
        return clusters.wait_condition(
            self.cluster,
            self.namespace,
            "brokers",
            name or self.broker_names[0],
            condition,
            timeout=timeout,
        )

    # -- topology and data -------------------------------------------------------------------

    def apply_topology(self, *manifests: Path | str, timeout: float = 90) -> None:
        """Applies manifests, then waits until every topology object in the namespace is Ready."""
        for manifest in manifests:
            self.cluster.apply(self.namespace, manifest)
        clusters.wait_all_ready(self.cluster, self.namespace, TOPOLOGY_PLURALS, timeout=timeout)

    def management(self, name: str | None = None) -> management.Management:
        return management.Management(self.brokers[name or self.broker_names[0]].endpoint)

    def job(self, name: str, queue: str, **kwargs: Any) -> pipeline.JobRun:
        return pipeline.JobRun(queue, self.work_dir / "jobs" / name, self.endpoint, **kwargs)

    def start_job(self, run: pipeline.JobRun, *, available_now: bool) -> launchers.Child:
        child = run.start(available_now=available_now, log_name=f"job-{len(self.jobs)}.log")
        self.jobs.append(child)
        self.remember("spark-job", child.pid)
        return child

    def stop(self) -> None:
        """Stops what the chain started, newest first; safe to call twice."""
        for job in reversed(self.jobs):
            job.stop(grace=5)
        if self.operator is not None:
            self.operator.stop()
        for name in reversed(self.broker_names):
            self.stop_broker(name)
