"""The pinned helm binary (built into the k8s-bins cache by localkube/gobuild/build-binaries.sh)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hutch_localkube import binaries
from hutch_testing import backgroundbuild, levels

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hutch-operator"
KUBE_VERSION = "1.36.4"  # a go-installed helm defaults to v1.20 capabilities


@pytest.fixture(scope="session")
@levels.broker_level  # its users run helm
def helm() -> Path:
    try:
        path = backgroundbuild.bin_dir() / "helm"
    except binaries.BinariesMissingError as exc:
        if binaries.k8s_required():
            pytest.fail(f"helm is required here: {exc}")
        pytest.skip(f"helm missing: {exc}")
    if not path.is_file():
        pytest.fail(f"{path} missing; run localkube/gobuild/build-binaries.sh")
    return path


@pytest.fixture(scope="session")
def render(helm: Path) -> Any:
    """render(*--set args) -> list of rendered objects."""

    def run(
        *sets: str, namespace: str = "hutch-system", api_versions: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        args = [str(helm), "template", "hutch", str(CHART), "--kube-version", KUBE_VERSION,
                "-n", namespace]  # fmt: skip
        for version in api_versions:
            args += ["--api-versions", version]
        for value in sets:
            args += ["--set", value]
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]

    return run


@pytest.fixture(scope="module")
def releases(helm: Path, apiserver: Any) -> Iterator[Callable[..., str]]:
    """install(name, namespace, *--set values) -> helm's output; every release the module
    installed is uninstalled at its end, so cluster-wide objects (the finalizer policy) never
    leak into later tests."""
    installed: list[tuple[str, str]] = []
    kubeconfig = ["--kubeconfig", str(apiserver.kubeconfig)]

    def install(name: str, namespace: str, *sets: str) -> str:
        args = [str(helm), "install", name, str(CHART), "-n", namespace, *kubeconfig]
        for value in sets:
            args += ["--set", value]
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        installed.append((name, namespace))
        return result.stdout

    yield install
    for name, namespace in reversed(installed):
        subprocess.run(
            [str(helm), "uninstall", name, "-n", namespace, "--wait", *kubeconfig],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
