"""The Hutch chain as steps: CRDs, namespace, operator, Brokers, their Pods, topology, jobs.

Why one class for the quickstart and the e2e suite: both must drive the same chain, and the
e2e suite is only worth its minutes if it checks what the quickstart shows. A ``Chain`` owns
one namespace on one cluster, one operator release in it, and the Brokers named at
construction. Each step is a method; ``stop()`` stops everything the chain started on this
host, newest first.

Everything runs as on a user's cluster: the operator is ``helm install`` of
charts/hutch-operator (``releases``), each Broker's broker is the Pod of the StatefulSet the
operator made, and the operator reaches it through its Service name. The cluster is the local
plane's ``node`` tier (a real kubelet and containerd, hutch_localkube.realnode) or any
kubeconfig (kind). Publishers, consumers and the Spark job on this host reach a broker through
``kubectl port-forward svc/<broker>`` on loopback ports, the same way on both (why not a
NodePort: docs/real-node.md, "Outside access").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

from hutch_localkube import provisioner

from hutch_demo import (
    clienttls,
    clusters,
    launchers,
    localnode,
    management,
    pipeline,
    pods,
    releases,
)

EXAMPLES = clusters.REPO_ROOT / "examples"
CRDS = clusters.REPO_ROOT / "crds"
TOPOLOGY_PLURALS = ["exchanges", "queues", "bindings", "policies", "operatorpolicies"]
log = logging.getLogger("hutch.chain")
POD_TIMEOUT = 300  # seconds; images are local, so this is the broker's start, never a pull


@dataclass
class BrokerHandle:
    """One Broker CR, its Pod, and the port-forward that serves it on loopback."""

    name: str
    endpoint: launchers.Endpoint = field(default_factory=launchers.Endpoint.allocate)
    rendered: launchers.Rendered | None = None
    port_forward: launchers.Child | None = None
    pod_uid: str | None = None
    tls: clienttls.BrokerTLS | None = None  # from its spec.tls: how clients here connect

    @property
    def pod_name(self) -> str:
        return f"{self.name}-server-0"  # StatefulSet <name>-server, one replica


@dataclass
class Chain:
    """One namespace, one operator release and its Brokers' Pods, with what serves them here."""

    cluster: clusters.Cluster
    namespace: str
    work_dir: Path
    broker_names: tuple[str, ...] = ("hutch",)
    brokers: dict[str, BrokerHandle] = field(default_factory=dict)
    operator: releases.OperatorRelease | None = None
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
        """The namespace. Brokers' claims bind through the cluster's default class (on the
        local node its provisioner's, ``hutch-local``); ``volumes`` instead pre-makes a local
        PV of each size in ``hutch-test`` and makes that the default (``localnode``)."""
        self.cluster.create_namespace(self.namespace)
        if self.cluster.plane is None:
            return
        if volumes is not None:
            localnode.provide_volumes(self.cluster, volumes)
        else:
            localnode.make_default(self.cluster, provisioner.STORAGE_CLASS)

    def start_operator(self, *, all_namespaces: bool = False) -> None:
        """``helm install`` of the chart into the namespace; waits for the operator Pod.

        It watches this namespace only (a Role), unless ``all_namespaces``: then every
        namespace (the chart's default, a ClusterRole), as ``make run`` does on its own plane."""
        overrides: dict[str, Any] | None = {"watchNamespaces": []} if all_namespaces else None
        self.operator = releases.install(
            self.cluster, self.namespace, self.work_dir, overrides=overrides
        )

    # -- brokers -----------------------------------------------------------------------------

    def create_broker(
        self, manifest: Path | str = EXAMPLES / "broker.yaml", name: str | None = None
    ) -> launchers.Rendered:
        """Applies a Broker; returns the config and user the operator rendered for it.

        The Broker as applied decides how the clients here connect: with ``spec.tls``, AMQPS
        and HTTPS trusting its CA Secret's ``ca.crt`` (``clienttls``); else plain, as ever.
        """
        handle = self.brokers[name or self.broker_names[0]]
        self.cluster.apply(self.namespace, manifest)
        handle.rendered = launchers.read_rendered(self.cluster, self.namespace, handle.name)
        handle.endpoint.username = handle.rendered.username
        handle.endpoint.password = handle.rendered.password
        broker = self.cluster.get(clusters.cr_path(self.namespace, "brokers", handle.name))
        handle.tls = clienttls.broker_tls(broker or {})
        if handle.tls is not None:
            ca = clusters.secret_data(self.cluster, self.namespace, handle.tls.ca_secret) or {}
            if clienttls.CA_KEY not in ca:
                raise clusters.ClusterError(
                    f"Broker {handle.name} has spec.tls but Secret {handle.tls.ca_secret} has "
                    f"no {clienttls.CA_KEY} for its clients to trust"
                )
            handle.endpoint.ca_pem = ca[clienttls.CA_KEY]
            handle.endpoint.server_name = handle.tls.server_name
        return handle.rendered

    def start_broker(self, name: str | None = None, *, timeout: float = POD_TIMEOUT) -> None:
        """Waits for the broker Pod, forwards its Service to loopback, waits Available+Ready."""
        handle = self.brokers[name or self.broker_names[0]]
        if handle.rendered is None:
            raise clusters.ClusterError("create_broker() must run before start_broker()")
        pod = pods.wait_ready(
            self.cluster, self.namespace, handle.pod_name, timeout=timeout, not_uid=handle.pod_uid
        )
        handle.pod_uid = pod["metadata"]["uid"]
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

    def restart_broker(self, name: str, *, timeout: float = POD_TIMEOUT) -> launchers.Rendered:
        """After a Broker spec change: the new rendering, then its rolled Pod behind a new
        port-forward (a port-forward ends with the Pod it was bound to)."""
        handle = self.brokers[name]
        old = handle.rendered.config if handle.rendered else None
        handle.rendered = clusters.wait_for(
            lambda: self._changed_rendering(handle.name, old),
            f"ConfigMap {handle.name}-config re-rendered",
            timeout=timeout,
        )
        self.stop_broker(name)
        self.start_broker(name, timeout=timeout)  # waits for a Pod other than the old one
        return handle.rendered

    def _changed_rendering(self, name: str, old: str | None) -> launchers.Rendered | None:
        rendered = launchers.read_rendered(self.cluster, self.namespace, name)
        return rendered if rendered.config != old else None

    def stop_broker(self, name: str) -> None:
        """Ends the port-forward; the Pod is the StatefulSet's to manage."""
        handle = self.brokers[name]
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

    def job(self, name: str, queue: str, **kwargs: Unpack[pipeline.JobOptions]) -> pipeline.JobRun:
        return pipeline.JobRun(queue, self.work_dir / "jobs" / name, self.endpoint, **kwargs)

    def start_job(self, run: pipeline.JobRun, *, available_now: bool) -> launchers.Child:
        child = run.start(available_now=available_now, log_name=f"job-{len(self.jobs)}.log")
        self.jobs.append(child)
        self.remember("spark-job", child.pid)
        return child

    # -- what ran ----------------------------------------------------------------------------

    def pod_facts(self) -> list[pods.PodFacts]:
        """The operator's and the brokers' Pods as the kubelet reports them, in that order."""
        found = [self.operator.pod()] if self.operator is not None else []
        found += [pods.get_pod(self.cluster, self.namespace, h.pod_name) for h in self.started]
        return [pods.facts(pod) for pod in found if pod is not None]

    @property
    def started(self) -> list[BrokerHandle]:
        return [h for h in self.brokers.values() if h.pod_uid is not None]

    def save_logs(self) -> None:
        """Every Pod's log into ``logs/`` (the processes here already write there)."""
        pods.save_logs(self.cluster, self.namespace, self.logs)

    def stop(self) -> None:
        """Stops what the chain started here, newest first; safe to call twice.

        The Pods go with the namespace (external cluster) or with the plane (local).
        """
        for job in reversed(self.jobs):
            job.stop(grace=5)
        for name in reversed(self.broker_names):
            self.stop_broker(name)
        if self.cluster.plane is None and self.operator is not None:
            self.remove()  # the local plane goes whole; another cluster keeps nothing of ours

    def remove(self, timeout: float = 120) -> dict[str, float]:
        """Uninstalls in the order that cannot strand a finalizer; seconds per step.

        The Hutch objects go first, while the operator still runs to release their finalizers
        (it deletes them from the broker); then the release; then the namespace with the
        brokers' Pods and PVCs. Deleting the namespace first would remove the operator's Pod
        (it lives there) with objects still waiting for it, and the namespace would hang.
        """
        seconds: dict[str, float] = {}
        began = time.monotonic()
        self.cluster.kubectl(
            "delete", "hutch", "--all", "-n", self.namespace, "--wait",
            f"--timeout={int(timeout)}s",
        )  # fmt: skip
        seconds["objects"] = time.monotonic() - began
        operator, self.operator = self.operator, None
        if operator is not None:
            seconds["release"] = operator.uninstall(timeout=timeout)
        began = time.monotonic()
        self.cluster.kubectl(
            "delete", "namespace", self.namespace, "--wait", f"--timeout={int(timeout)}s"
        )
        seconds["namespace"] = time.monotonic() - began
        log.info("removed %s: %s", self.namespace, {k: round(v, 1) for k, v in seconds.items()})
        return seconds
