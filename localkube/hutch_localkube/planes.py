"""A real, local Kubernetes control plane for Hutch's tests, e2e and quickstart.

Why: Hutch depends on behaviour only a real kube-apiserver (CRD schemas, CEL, RBAC, watches) and
kube-controller-manager (garbage collection, namespace deletion) provide, and our machines have
no container engine. So, like controller-runtime's envtest, a ``Plane`` starts the upstream
binaries built by ``localkube/gobuild/build-binaries.sh`` as local processes on loopback
(contract: docs/contracts/local-kubernetes.md, operator notes: docs/control-plane.md).

One ``Plane`` is one control plane of a tier (``apiserver``, ``workloads`` or ``node``) with its
own run directory, PKI, kubeconfig and ports; every process it starts is stopped by its own PID.
The ``node`` tier adds one real node (containerd + kubelet: ``realnode``, docs/real-node.md).
``REGISTRY`` holds this process's planes, at most one per tier, for the CLI (``cli``), the
pytest plugin (hutch_testing.localkube_plugin), the quickstart and the benchmarks alike.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime
import functools
import ipaddress
import json
import logging
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from hutch_localkube import (
    binaries,
    images,
    imagestore,
    pki,
    provisioner,
    realnode,
    supervision,
)

log = logging.getLogger("hutch.k8s")

ARTIFACTS_DIR = binaries.REPO_ROOT / "test-artifacts"
PORT_NAMES = (
    *("etcd", "peer", "api", "kcm", "sched", "kwok"),
    *("kubelet", "kubelet-healthz", "proxy-healthz", "proxy-metrics", "dns-health", "dns-ready"),
)
FAKE_NODES = ("kwok-node-0", "kwok-node-1", "kwok-node-2")
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    # Without pod-delete, deleted Pods hang in Terminating: there is no kubelet.
    "pod/fast/pod-delete.yaml",
)
STORAGE_CLASS = "hutch-test"
NODE_CONFIGS = ("containerd.toml", "kubelet-config.json", "kube-proxy-config.json", "Corefile")
# The node tier's host processes (``_start_node``): stopped, and the node cleaned up, first.
NODE_COMPONENTS = frozenset({"coredns", "containerd", "kubelet", "kube-proxy", "provisioner"})
# Dockerfile images every node start imports (``images``), beside the pause image.
NODE_IMAGES = ("broker", "operator")


class PlaneStartError(RuntimeError):
    """The control plane did not come up; the message carries the tail of every log."""


class PlaneStopError(RuntimeError):
    """A stop left something behind on the host (a process, mount, cgroup or the bridge)."""


# --- The plane -------------------------------------------------------------------------------


@dataclass
class Component:
    """A process this plane started: stopped by this PID only, never by name."""

    name: str
    exe: str
    proc: subprocess.Popen[bytes]


class Plane:
    """One local control plane of a tier; start() brings it up, stop() removes every trace."""

    def __init__(
        self, tier: str, bin_dir: Path, run_dir: Path, shm_dir: Path, kubectl: Path
    ) -> None:
        self.tier = tier
        self.bin_dir = bin_dir
        self.run_dir = run_dir
        self.shm_dir = shm_dir
        self.kubectl_path = kubectl
        self.ports = dict(zip(PORT_NAMES, supervision.free_ports(len(PORT_NAMES)), strict=True))
        self.pki = run_dir / "pki"
        self.logs = run_dir / "logs"
        self.kubeconfig = run_dir / "kubeconfig"
        self.components: list[Component] = []
        self.failed = False
        self.stopped = False
        self.start_seconds = 0.0
        self.started_at = 0.0  # time.time() when start() began
        self.node_seconds: dict[str, float] = {}  # node tier: time per start step
        self._added_images: dict[str, str] = {}  # add_image(): kind -> imported name
        self._admin_ssl: ssl.SSLContext | None = None
        self._node_lock: int | None = None
        self.node_layout = realnode.NodeLayout(
            run_dir, self.ports["kubelet"], self.ports["kubelet-healthz"]
        )

    @property
    def server(self) -> str:
        """The apiserver URL written into the kubeconfig."""
        return f"https://127.0.0.1:{self.ports['api']}"

    # -- lifecycle --

    def start(self) -> None:
        """Starts the tier's components in order, each waited on before the next."""
        began, self.started_at = time.monotonic(), time.time()
        self._prepare()
        self._start_etcd()
        self._start_apiserver()
        if self.tier in binaries.WORKLOAD_TIERS:
            self._start_controllers()
            self._start_kwok()
            self._create_workload_fixtures()
        if self.tier == "node":
            self._start_node()
        self.start_seconds = time.monotonic() - began
        log.info("k8s plane %s ready in %.1fs at %s", self.tier, self.start_seconds, self.run_dir)

    def stop(self, keep: bool = False) -> None:
        """Stops components in reverse start order; saves logs on failure; removes the run."""
        if self.stopped:
            return
        self.stopped = True
        leftovers: list[str] = []
        try:
            for component in reversed(self.components):
                if component.name in NODE_COMPONENTS:
                    supervision.stop_child(component.proc)
        finally:
            # The node's cleanup kills the Pods' processes before the control plane stops: an
            # operator Pod's open watches kept kube-apiserver's graceful shutdown waiting until
            # our SIGKILL, 10 s later, at the end of every make run.
            try:
                leftovers = self._stop_node()
            finally:
                for component in reversed(self.components):
                    if component.name not in NODE_COMPONENTS:
                        supervision.stop_child(component.proc)
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "pids").unlink()
        if self.failed:
            self.save_artifacts()
        if keep or binaries.env_flag("HUTCH_K8S_KEEP"):
            log.warning("HUTCH_K8S_KEEP: kept %s and %s", self.run_dir, self.shm_dir)
        else:
            supervision.remove_run(self.run_dir)
        if leftovers:
            raise PlaneStopError(f"node teardown left: {'; '.join(leftovers)}")

    def save_artifacts(self) -> Path:
        """Copies logs and rendered configs to test-artifacts/ (git-ignored; CI uploads it)."""
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
        target = ARTIFACTS_DIR / f"k8s-{stamp}-{self.tier}-{os.getpid()}"
        shutil.copytree(self.logs, target / "logs", dirs_exist_ok=True)
        if self.node_layout.pod_logs.is_dir():
            shutil.copytree(self.node_layout.pod_logs, target / "pod-logs", dirs_exist_ok=True)
        for name in ("kubeconfig", "kwok-stages.yaml", "fake-nodes.json", *NODE_CONFIGS):
            if (self.run_dir / name).is_file():
                shutil.copy2(self.run_dir / name, target / name)
        log.warning("k8s logs saved to %s", target)
        return target

    def _prepare(self) -> None:
        """Run dir, PKI, kubeconfig and the owner line of ``pids``, before any process exists."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self.shm_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "shm-dir").write_text(str(self.shm_dir))
        # Whole or absent: another pytest process's reaper (supervision.reap_stale_runs) may
        # read it at any moment, and an empty one would read as a run whose owner is gone.
        partial = self.run_dir / "pids.new"
        partial.write_text(f"owner {os.getpid()} {supervision.self_exe()}\n")
        os.replace(partial, self.run_dir / "pids")
        pki.make_pki(self.pki, realnode.NODE_IP)
        self.kubeconfig.write_text(pki.kubeconfig_text(self.server, self.pki))

    def _launch(self, name: str, args: list[str], binary: Path | None = None) -> Component:
        """Starts one binary in its own session, logging to logs/<name>.log, recorded by PID."""
        binary = binary or self.bin_dir / name
        exe = os.path.realpath(binary)
        with (self.logs / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.run_dir,
            )
        component = Component(name, exe, proc)
        self.components.append(component)
        with (self.run_dir / "pids").open("a") as pids:
            pids.write(f"{name} {proc.pid} {exe}\n")
        return component

    def _wait(self, what: str, probe: Callable[[], bool], timeout: float) -> None:
        """Polls every 100 ms; a component that exits or a timeout fails with the log tails."""
        deadline = time.monotonic() + timeout
        while True:
            dead = [c for c in self.components if c.proc.poll() is not None]
            if dead:
                raise PlaneStartError(
                    f"{dead[0].name} exited with {dead[0].proc.returncode} while waiting for "
                    f"{what}\n{supervision.log_tails(self.logs)}"
                )
            if probe():
                return
            if time.monotonic() > deadline:
                raise PlaneStartError(
                    f"{what} not ready after {timeout}s\n{supervision.log_tails(self.logs)}"
                )
            time.sleep(supervision.POLL_SECONDS)

    # -- components --

    def _start_etcd(self) -> None:
        """etcd on loopback, data on /dev/shm, fsync off: durability is irrelevant here."""
        etcd, peer = self.ports["etcd"], self.ports["peer"]
        self._launch(
            "etcd",
            [
                "--name=hutch",
                f"--data-dir={self.shm_dir / 'etcd'}",
                "--unsafe-no-fsync",
                "--log-level=warn",
                f"--listen-client-urls=http://127.0.0.1:{etcd}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=hutch=http://127.0.0.1:{peer}",
            ],
        )
        url = f"http://127.0.0.1:{etcd}/health"
        self._wait(
            "etcd /health", lambda: _json_field(supervision.http_get(url), "health") == "true", 30
        )

    def _apiserver_args(self) -> list[str]:
        """envtest-like flags; SA admission only when the SA controller runs.

        docs/contracts/local-kubernetes.md#control-plane
        """
        pki_dir = self.pki
        args = [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['api']}",
            f"--cert-dir={pki_dir}",
            f"--tls-cert-file={pki_dir / 'serving.crt'}",
            f"--tls-private-key-file={pki_dir / 'serving.key'}",
            f"--client-ca-file={pki_dir / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki_dir / 'sa.pub'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            f"--service-cluster-ip-range={realnode.SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # Stops the recurring failure to write 127.0.0.1 into default/kubernetes Endpoints.
            "--endpoint-reconciler-type=none",
        ]
        if self.tier == "apiserver":
            # No controller-manager means no `default` ServiceAccount for Pods to reference.
            args.append("--disable-admission-plugins=ServiceAccount")
        if self.tier == "node":
            # Pods reach the apiserver as in any cluster: Service default/kubernetes (10.0.0.1)
            # -> kube-proxy -> the node IP, where the apiserver must listen too. The lease
            # reconciler writes that endpoint (a loopback endpoint is invalid, hence "none"
            # in the other tiers). One address cannot be both 127.0.0.1 and the bridge's.
            for loopback_only in (
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
            ):
                args.remove(loopback_only)
            args += [
                "--bind-address=0.0.0.0",  # loopback for us, the node IP for Pods
                f"--advertise-address={realnode.NODE_IP}",
                # The Node authorizer scopes the kubelet to its own node, as in production.
                "--authorization-mode=Node,RBAC",
                # logs/exec/port-forward: dial the node's IP (no DNS for its name), verify it.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={pki_dir / 'ca.crt'}",
                f"--kubelet-client-certificate={pki_dir / 'admin.crt'}",
                f"--kubelet-client-key={pki_dir / 'admin.key'}",
            ]
            args.remove("--authorization-mode=RBAC")
        return args

    def _start_apiserver(self) -> None:
        """kube-apiserver; ready when anonymous /readyz (verified against our CA) says ok."""
        self._launch("kube-apiserver", self._apiserver_args())
        ca = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        url = f"{self.server}/readyz"
        self._wait(
            "kube-apiserver /readyz", lambda: supervision.http_get(url, ca) == (200, b"ok"), 60
        )

    def _controller_args(self) -> list[str]:
        """Flags shared by controller-manager and scheduler: admin kubeconfig, our serving cert."""
        kc = self.kubeconfig
        return [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            f"--tls-cert-file={self.pki / 'serving.crt'}",
            f"--tls-private-key-file={self.pki / 'serving.key'}",
        ]

    def _start_controllers(self) -> None:
        """kube-controller-manager and kube-scheduler, both waited on via /healthz."""
        self._launch(
            "kube-controller-manager",
            [
                *self._controller_args(),
                f"--secure-port={self.ports['kcm']}",
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                f"--root-ca-file={self.pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                # Its default, /usr/libexec/kubernetes/..., is created on the host and left there.
                f"--flex-volume-plugin-dir={self.run_dir / 'kcm-flexvolume'}",
            ],
        )
        self._launch(
            "kube-scheduler",
            [
                *self._controller_args(),
                f"--secure-port={self.ports['sched']}",
            ],
        )
        ca = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        for name in ("kcm", "sched"):
            url = f"https://127.0.0.1:{self.ports[name]}/healthz"
            self._wait(f"{name} /healthz", functools.partial(_healthy, url, ca), 60)
        # The SA controller must have run before any Pod can pass ServiceAccount admission.
        self._wait_for_default_sa("default")

    def _wait_for_default_sa(self, namespace: str) -> None:
        """Pods are refused by ServiceAccount admission until the SA controller made this."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        self._wait(f"ServiceAccount {namespace}/default", lambda: self.exists(path), 60)

    def exists(self, path: str) -> bool:
        """True if GET on an API path answers 200."""
        return self.api("GET", path)[0] == 200

    def _start_kwok(self) -> None:
        """kwok fakes kubelets for annotated Nodes, driven by the upstream stage YAML."""
        module = binaries.kwok_module_dir(self.bin_dir)
        stages = [(module / "kustomize" / "stage" / f).read_text() for f in KWOK_STAGE_FILES]
        config = self.run_dir / "kwok-stages.yaml"
        config.write_text("\n---\n".join(s.strip() for s in stages) + "\n")
        self._launch(
            "kwok",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                f"--server-address=127.0.0.1:{self.ports['kwok']}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                "--node-lease-duration-seconds=40",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.200.0.1",
            ],
        )
        url = f"http://127.0.0.1:{self.ports['kwok']}/healthz"
        self._wait("kwok /healthz", lambda: supervision.http_get(url)[0] == 200, 30)

    def _create_workload_fixtures(self) -> None:
        """Three fake Nodes (for hostname anti-affinity) and the StorageClass test PVs use."""
        nodes = [fake_node(name) for name in FAKE_NODES]
        if self.tier == "node":  # Pods go to the real node unless they tolerate the fakes
            for node in nodes:
                node["spec"] = {"taints": [realnode.FAKE_NODE_TAINT]}
        (self.run_dir / "fake-nodes.json").write_text(json.dumps(nodes, indent=1))
        for node in nodes:
            self.create("/api/v1/nodes", node)
        self.create(
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": STORAGE_CLASS},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )
        self._wait("3 kwok Nodes Ready", self._nodes_ready, 60)

    # -- the real node (tier "node", realnode) --

    def _start_node(self) -> None:
        """Host setup, containerd, images, kubelet: each step timed (the node is the slow part)."""
        self._timed("host", self._prepare_node_host)
        self._timed("coredns", self._start_coredns)
        self._timed("containerd", self._start_containerd)
        self._timed("images", self._import_images)
        self._timed("kubelet", self._start_kubelet)
        self._timed("kube-proxy", self._start_kube_proxy)
        self._timed("provisioner", self._start_provisioner)

    def _timed(self, step: str, action: Callable[[], None]) -> None:
        began = time.monotonic()
        action()
        self.node_seconds[step] = time.monotonic() - began

    def _prepare_node_host(self) -> None:
        """One node plane per machine (the bridge is shared); host changes recorded first."""
        self._node_lock = realnode.acquire_lock()
        realnode.prepare_host(self.node_layout)

    def _start_coredns(self) -> None:
        """Cluster DNS on the bridge address (10.246.0.1:53), before any Pod can start; ready
        when it answers kubernetes.default.svc with that Service's ClusterIP over UDP and TCP."""
        pki.load_ca(self.pki).issue(
            self.pki / "coredns",
            pki.subject_name(realnode.COREDNS_USER),
            ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        for path, obj in realnode.coredns_rbac():
            self.create(path, obj)
        kubeconfig = self.run_dir / "coredns.kubeconfig"
        kubeconfig.write_text(pki.kubeconfig_text(self.server, self.pki, user="coredns"))
        self.node_layout.resolv_conf.write_text(realnode.resolv_conf())
        corefile = self.run_dir / "Corefile"
        ports = self.ports["dns-health"], self.ports["dns-ready"]
        corefile.write_text(realnode.corefile(kubeconfig, *ports))
        self._launch("coredns", [f"-conf={corefile}"])
        self._wait("CoreDNS answering on the bridge", self._dns_answers, 30)

    def _dns_answers(self) -> bool:
        name = f"kubernetes.default.svc.{realnode.CLUSTER_DOMAIN}"
        try:
            replies = [realnode.dns_query(name, tcp=tcp, timeout=0.5) for tcp in (False, True)]
        except OSError:
            return False
        return all(reply.answers == ["10.0.0.1"] for reply in replies)

    def _start_containerd(self) -> None:
        """Debian's containerd on a private socket, with our CNI config dir; its root is the
        image store kept between starts (``imagestore``), emptied of an earlier run's
        containers before kubelet can see them."""
        layout = self.node_layout
        layout.containerd_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "cni").mkdir(exist_ok=True)
        (self.run_dir / "cni" / "10-hutch.conflist").write_text(realnode.cni_conflist(layout))
        root = imagestore.root_dir(realnode.CONTAINERD)
        config = self.run_dir / "containerd.toml"
        config.write_text(realnode.containerd_config(layout, root))
        imagestore.remove_run_files(root)
        containerd = self._launch_containerd(config)
        if imagestore.remove_containers(self._checked_ctr):
            # The CRI plugin loaded those at start: it starts again with none, and without
            # their per-Pod files.
            supervision.stop_child(containerd.proc)
            self.components.remove(containerd)
            imagestore.remove_run_files(root)
            self._launch_containerd(config)

    def _launch_containerd(self, config: Path) -> Component:
        component = self._launch("containerd", [f"--config={config}"], binary=realnode.CONTAINERD)
        self._wait("containerd", lambda: self.ctr("version").returncode == 0, 30)
        return component

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Debian's ctr against this node's containerd, namespace k8s.io (the CRI's)."""
        socket_path = str(self.node_layout.containerd_socket)
        return subprocess.run(
            [str(realnode.CTR), "--address", socket_path, "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    def _checked_ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``ctr`` that must succeed: a failure stops the start with its stderr."""
        done = self.ctr(*args)
        if done.returncode != 0:
            raise PlaneStartError(f"ctr {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def _import_images(self) -> None:
        """Builds (cached) and loads the sandbox, broker and operator images into the store:
        nothing is ever pulled. The operator image is what ``helm install`` of
        charts/hutch-operator runs here."""
        layouts = [images.build_pause()]
        layouts += [images.build_dockerfile_image(kind) for kind in NODE_IMAGES]
        self._load_images(layouts)

    def _load_images(self, layouts: list[Path]) -> None:
        """Imports what the store lacks (``imagestore.load``), and logs which it did."""
        socket = self.node_layout.containerd_socket
        imported = imagestore.load(self._checked_ctr, socket, layouts)
        log.info("image store: imported %s", ", ".join(imported) if imported else "nothing")

    def add_image(self, kind: str) -> str:
        """An image outside NODE_IMAGES (hutch-spark, ~1 GB), built (cached) and loaded on
        first use, so only the tests that run it pay for it, and only when the store does not
        hold it yet; both times go into the summary's ``K8S: node start step`` lines. Returns
        the image name."""
        if kind not in self._added_images:
            began = time.monotonic()
            layout = images.build_dockerfile_image(kind)
            self.node_seconds[f"image {kind} build (0 when cached)"] = time.monotonic() - began
            self._timed(f"image {kind} import (0 when stored)", lambda: self._load_images([layout]))
            self._added_images[kind] = images.image_name(layout)
        return self._added_images[kind]

    @property
    def helm_path(self) -> Path:
        """The pinned helm built beside the plane's binaries (build-binaries.sh)."""
        return self.bin_dir / "helm"

    def _issue_node_certs(self) -> None:
        """The kubelet's client cert (Node authorizer identity) and its serving cert."""
        ca = pki.load_ca(self.pki)
        node = realnode.NODE_NAME
        ca.issue(
            self.pki / "kubelet",
            pki.subject_name(f"system:node:{node}", "system:nodes"),
            ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        sans: list[x509.GeneralName] = [
            x509.IPAddress(ipaddress.ip_address(realnode.NODE_IP)),
            x509.DNSName(node),
        ]
        ca.issue(
            self.pki / "kubelet-serving",
            pki.subject_name(node),
            ExtendedKeyUsageOID.SERVER_AUTH,
            sans,
        )

    def _start_kubelet(self) -> None:
        """kubelet v1.36 on cgroup v1; ready when its Node reports Ready."""
        self._issue_node_certs()
        layout = self.node_layout
        kubeconfig = self.run_dir / "kubelet.kubeconfig"
        kubeconfig.write_text(pki.kubeconfig_text(self.server, self.pki, user="kubelet"))
        config = self.run_dir / "kubelet-config.json"  # JSON is YAML: kubelet reads it as is
        config.write_text(realnode.kubelet_config(layout, self.pki, layout.cgroup_name))
        self._launch("kubelet", realnode.kubelet_args(layout, config, kubeconfig))
        self._wait(f"Node {realnode.NODE_NAME} Ready", self._real_node_ready, 90)

    def _start_kube_proxy(self) -> None:
        """kube-proxy (nftables mode) makes ClusterIPs route; ready when its /healthz is 200."""
        ca = pki.load_ca(self.pki)
        ca.issue(
            self.pki / "kube-proxy",
            pki.subject_name(
                "system:kube-proxy"
            ),  # bound to system:node-proxier by the bootstrap policy
            ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        kubeconfig = self.run_dir / "kube-proxy.kubeconfig"
        kubeconfig.write_text(pki.kubeconfig_text(self.server, self.pki, user="kube-proxy"))
        config = self.run_dir / "kube-proxy-config.json"
        healthz = self.ports["proxy-healthz"]
        config.write_text(
            realnode.kube_proxy_config(kubeconfig, healthz, self.ports["proxy-metrics"])
        )
        state = realnode.NodeState.load(self.run_dir)
        if state is None:  # prepare_host wrote it before any node process started
            raise PlaneStartError(
                f"no node.json in {self.run_dir}\n{supervision.log_tails(self.logs)}"
            )
        state.proxy_started = True
        state.save()
        self._launch("kube-proxy", [f"--config={config}"])
        url = f"http://127.0.0.1:{healthz}/healthz"
        self._wait("kube-proxy /healthz", lambda: supervision.http_get(url)[0] == 200, 60)

    def _start_provisioner(self) -> None:
        """The node's dynamic provisioner (``provisioner``, docs/real-node.md "Storage"): a host
        process like CoreDNS, with a certificate identity and a ClusterRole of its own. Its
        class ``hutch-local`` is the default, so a PVC that names no class binds as on any
        cluster; ready when its first pass over the API succeeded."""
        pki.load_ca(self.pki).issue(
            self.pki / "provisioner",
            pki.subject_name(provisioner.USER),
            ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        for path, obj in provisioner.rbac():
            self.create(path, obj)
        self.create("/apis/storage.k8s.io/v1/storageclasses", provisioner.storage_class())
        args = ["-m", "hutch_localkube.provisioner", f"--server={self.server}",
                f"--pki={self.pki}", f"--root={self.node_layout.volumes_dir}"]  # fmt: skip
        self._launch("provisioner", args, binary=Path(sys.executable))
        log_path = self.logs / "provisioner.log"
        self._wait(
            "the volume provisioner",
            lambda: provisioner.READY_LINE in log_path.read_text(errors="replace"),
            30,
        )

    def _real_node_ready(self) -> bool:
        status, node = self.api("GET", f"/api/v1/nodes/{realnode.NODE_NAME}")
        conditions = node.get("status", {}).get("conditions", []) if status == 200 else []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _stop_node(self) -> list[str]:
        """After kubelet and containerd stopped: containers, mounts, cgroups, bridge, rule.

        Returns what is still there (a leak: the caller fails loudly).
        """
        if self.tier != "node":
            return []
        try:
            state = realnode.NodeState.load(self.run_dir)
            realnode.cleanup(self.run_dir)
            layout = self.node_layout
            left: list[str] = realnode.leftovers(
                self.run_dir,
                str(layout.containerd_socket),
                layout.cgroup_name,
                state,
            )
            if left:
                log.error("node teardown left: %s", "; ".join(left))
                self.failed = True
            return left
        finally:
            if self._node_lock is not None:
                realnode.release_lock(self._node_lock)
                self._node_lock = None

    def make_local_pvs(self, n: int, size: str = "1Gi") -> list[str]:
        """n local PVs of class hutch-test: directories on the real node's disk, in the run."""
        names = []
        for _ in range(n):
            name = f"hutch-local-{secrets.token_hex(4)}"
            path = self.node_layout.volumes_dir / name
            path.mkdir(parents=True)
            self.create("/api/v1/persistentvolumes", realnode.local_pv(name, path, size))
            names.append(name)
        return names

    def _nodes_ready(self) -> bool:
        """Every fake Node reports Ready=True (kwok's node-initialize stage ran)."""
        for name in FAKE_NODES:
            status, node = self.api("GET", f"/api/v1/nodes/{name}")
            conditions = node.get("status", {}).get("conditions", []) if status == 200 else []
            if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return False
        return True

    # -- API access for the harness and tests --

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        """A raw admin request: keeps the harness free of client-library start-up cost."""
        if self._admin_ssl is None:
            ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
            ctx.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
            self._admin_ssl = ctx
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - https to our own loopback apiserver
            self.server + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        status, raw = _urlopen(request, self._admin_ssl)
        try:
            return status, json.loads(raw or b"{}")
        except ValueError:
            return status, {"raw": raw.decode(errors="replace")}

    def create(self, collection_path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """POSTs an object; anything but 201 Created is an error worth its message."""
        status, reply = self.api("POST", collection_path, obj)
        if status != 201:
            raise RuntimeError(f"POST {collection_path} -> {status}: {reply.get('message', reply)}")
        return reply

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Runs the pinned kubectl against this plane (tests, CRD applies, debugging)."""
        cmd = [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    def apply_crds(self, path: Path, timeout: int = 30) -> None:
        """Server-side applies CRDs and waits until they are Established.

        docs/contracts/local-kubernetes.md#control-plane
        """
        self.kubectl("apply", "--server-side", "-f", str(path))
        self.kubectl(
            "wait", "--for=condition=Established", f"--timeout={timeout}s", "-f", str(path)
        )

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this plane (imported lazily: it is slow)."""
        from kubernetes import config  # noqa: PLC0415 - slow; only tests that ask pay for it

        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )

    def create_namespace(self) -> str:
        """A fresh ``t-<8hex>`` namespace; in the workloads tier, waits for its default SA."""
        name = f"t-{secrets.token_hex(4)}"
        self.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        if self.tier in binaries.WORKLOAD_TIERS:
            self._wait_for_default_sa(name)
        return name

    def delete_namespace(self, name: str) -> None:
        """Starts deletion (workloads tier only: without the namespace controller it sticks)."""
        self.api("DELETE", f"/api/v1/namespaces/{name}")

    def make_pvs(self, n: int, size: str = "1Gi") -> list[str]:
        """Pre-creates n hostPath PVs of class hutch-test (never mounted: kwok runs nothing)."""
        names = []
        for _ in range(n):
            name = f"hutch-pv-{secrets.token_hex(4)}"
            self.create(
                "/api/v1/persistentvolumes",
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": name},
                    "spec": {
                        "capacity": {"storage": size},
                        "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": STORAGE_CLASS,
                        "hostPath": {"path": f"/nonexistent/hutch/{name}"},
                    },
                },
            )
            names.append(name)
        return names


def _urlopen(request: urllib.request.Request, context: ssl.SSLContext) -> tuple[int, bytes]:
    """urlopen that returns HTTP errors as (status, body) instead of raising."""
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as resp:  # noqa: S310 - loopback
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def _healthy(url: str, context: ssl.SSLContext) -> bool:
    """A /healthz probe for components serving with our CA-signed cert."""
    return supervision.http_get(url, context)[0] == 200


def _json_field(reply: tuple[int, bytes], key: str) -> Any:
    """A field of a JSON 200 reply, or None while the component is still starting."""
    status, body = reply
    if status != 200:
        return None
    try:
        return json.loads(body).get(key)
    except ValueError:
        return None


def fake_node(name: str) -> dict[str, Any]:
    """A Node kwok manages (by annotation): linux/amd64, big, untainted.

    docs/contracts/local-kubernetes.md#fake-nodes
    """
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "type": "kwok",
            },
        },
        # Nodes are the one kind whose status may be set on create.
        "status": {"capacity": resources, "allocatable": resources},
    }


# --- Starting planes (shared by pytest and the CLI) ---------------------------------------------


def new_plane(tier: str, run_dir: Path | None = None) -> Plane:
    """Builds (not starts) a plane with a fresh run dir and /dev/shm dir of the same name."""
    bin_dir = binaries.find_bin_dir()
    binaries.check_binaries(bin_dir, tier)
    kubectl = binaries.find_kubectl()
    if run_dir is None:
        run_dir = Path(tempfile.mkdtemp(prefix=f"hutch-k8s-{os.getpid()}-"))
        shm_name = run_dir.name
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        shm_name = f"hutch-k8s-dev-{os.getpid()}-{secrets.token_hex(3)}"
    shm_root = Path("/dev/shm")  # noqa: S108 - etcd's data in memory, in a run-named dir
    shm_dir = shm_root / shm_name if shm_root.is_dir() else run_dir / "shm"
    return Plane(tier, bin_dir, run_dir, shm_dir, kubectl)


class PlaneRegistry:
    """The planes of this process: at most one per tier, stopped at exit or on SIGTERM."""

    def __init__(self) -> None:
        self.planes: dict[str, Plane] = {}
        self.pending: collections.Counter[str] = collections.Counter()
        self.start_times: dict[str, float] = {}
        self.node_seconds: dict[str, float] = {}
        self._hooks_installed = False

    def acquire(self, tier: str) -> Plane:
        """Returns the live plane of a tier, starting it (after reaping stale runs) if needed."""
        if tier not in self.planes:
            supervision.reap_stale_runs()
            self.start(tier)
        return self.planes[tier]

    def start(self, tier: str, run_dir: Path | None = None) -> Plane:
        """Starts a plane, registered *before* start() so a SIGTERM mid-start still stops it.

        One retry with fresh ports if a port was taken meanwhile
        (docs/contracts/local-kubernetes.md#process-hygiene).
        """
        self.install_exit_hooks()
        for attempt in (1, 2):
            plane = self.planes[tier] = new_plane(tier, run_dir)
            try:
                plane.start()
            except BaseException as exc:
                in_use = "address already in use" in supervision.log_tails(plane.logs).lower()
                plane.failed = not isinstance(exc, KeyboardInterrupt)
                self.release(tier)
                if attempt == 1 and in_use and isinstance(exc, PlaneStartError):
                    log.warning("k8s plane %s: port taken, retrying with fresh ports", tier)
                    continue
                raise
            self.start_times[tier] = plane.start_seconds
            self.node_seconds.update(plane.node_seconds)
            return plane
        raise AssertionError("unreachable")

    def release(self, tier: str) -> None:
        """Stops a tier's plane as soon as no remaining test needs it."""
        plane = self.planes.pop(tier, None)
        if plane is not None:
            plane.stop()

    def mark_failed(self) -> None:
        """A k8s test failed: the live planes keep their logs in test-artifacts/."""
        for plane in self.planes.values():
            plane.failed = True

    def stop_all(self) -> None:
        """Stops every plane; idempotent, so atexit, SIGTERM and pytest can all call it."""
        for tier in list(self.planes):
            self.release(tier)

    def install_exit_hooks(self) -> None:
        """atexit plus a SIGTERM handler, so cancelled CI jobs leave no processes behind."""
        if self._hooks_installed:
            return
        self._hooks_installed = True
        atexit.register(self.stop_all)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous = signal.getsignal(signum)
            if previous is not signal.SIG_IGN:  # e.g. SIGHUP under nohup: keep ignoring it
                signal.signal(signum, self._signal_handler(previous))

    def _signal_handler(self, previous: Any) -> Callable[[int, Any], None]:
        """Stops the planes, then chains to the previous handler or dies of the signal."""

        def handler(signum: int, frame: Any) -> None:
            self.stop_all()
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        return handler


REGISTRY = PlaneRegistry()
