"""The node benchmarks' shared set-up (bench/nodesetup.py), with the node replaced by a recorder.

Why: both node benchmarks run outside CI, and this set-up's teardown is what leaves the real
node usable for the next run: the operator uninstalled and the node lock released whether the
run ends, fails or is interrupted, the Pods' logs kept when it fails. These pin that order.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import clusters, localnode, pods, releases

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import nodesetup  # noqa: E402


class Recorder:
    """Stands for the plane registry, the plane, the cluster and the operator release."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.REGISTRY = self

    def acquire(self, tier: str) -> Recorder:
        self.calls.append(f"acquire {tier}")
        return self

    def release(self, tier: str) -> None:
        self.calls.append(f"release {tier}")

    def apply_crds(self, path: Path) -> None:
        self.calls.append(f"crds {path.name}")

    def create_namespace(self, name: str) -> None:
        self.calls.append(f"namespace {name}")

    def add_image(self, name: str) -> str:
        self.calls.append(f"image {name}")
        return f"{name}:local"

    def uninstall(self) -> None:
        self.calls.append("uninstall")


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    fake = Recorder()
    monkeypatch.setenv("HUTCH_NODE_LOCK_WAIT", "")  # recorded, so undone after the test
    monkeypatch.delenv("HUTCH_NODE_LOCK_WAIT")
    monkeypatch.setattr(nodesetup, "node_packages", lambda: fake)
    monkeypatch.setattr(clusters, "local_cluster", lambda plane: plane)
    monkeypatch.setattr(
        localnode, "provide_volumes", lambda c, sizes: fake.calls.append(f"volumes {sizes}")
    )

    def install(cluster: Any, namespace: str, work: Path) -> Recorder:
        fake.calls.append(f"install {namespace}")
        return fake

    monkeypatch.setattr(releases, "install", install)
    monkeypatch.setattr(
        pods, "save_logs", lambda c, namespace, path: fake.calls.append(f"logs {path.name}")
    )
    return fake


SET_UP = [
    "acquire node",
    "crds crds",
    "volumes ['2Gi']",
    "namespace bench-ns",
    "install bench-ns",
    "image spark",
]


def test_the_node_is_set_up_in_order_and_torn_down_in_reverse(
    recorder: Recorder, tmp_path: Path
) -> None:
    with nodesetup.node("bench-ns", tmp_path) as found:
        assert (found.plane, found.cluster, found.image) == (recorder, recorder, "spark:local")
        recorder.calls.append("run")
    assert recorder.calls == [*SET_UP, "run", "uninstall", "release node"]
    assert nodesetup.os.environ["HUTCH_NODE_LOCK_WAIT"] == nodesetup.LOCK_WAIT_S


@pytest.mark.parametrize("error", [RuntimeError("job failed"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_run_keeps_the_pod_logs_and_still_frees_the_node(
    recorder: Recorder, tmp_path: Path, error: BaseException
) -> None:
    with pytest.raises(type(error)), nodesetup.node("bench-ns", tmp_path):
        raise error
    assert recorder.calls == [*SET_UP, "logs pod-logs", "uninstall", "release node"]
