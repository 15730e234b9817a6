"""The Spark node tests' shared setup (sparkpods.on_node, sparkoperator.on_node): what happens
at its end, in which order.

Why: every Spark node test stands on this setup, and its end is where evidence is lost or a
namespace is left stuck. After a failure the namespace's Pod logs must be saved before anything
is removed (uninstalling the Spark Operator's releases takes the driver Pods and their logs with
them); what a caller put on top (those releases) must go before the Hutch objects; and the hutch
operator must go last, since it releases the Brokers' finalizers. In memory: the plane, the
cluster and the release are stand-ins that write down what is done to them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import clusters, localnode, pods, releases, sparkoperator, sparkpods


class _Recorder:
    """The node, the cluster, the operator release and Helm in one: each call is a line."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def apply_crds(self, _path: Path) -> None:
        self.calls.append("crds")

    def make_local_pvs(self, count: int, size: str) -> list[str]:
        self.calls.append(f"pvs {count} {size}")
        return [f"pv-{n}" for n in range(count)]

    def kubectl(self, *args: str, check: bool = True) -> None:
        self.calls.append("kubectl " + " ".join(args[:3]))

    def uninstall(self) -> None:
        self.calls.append("operator uninstalled")

    def uninstall_both(self) -> None:
        self.calls.append("spark releases uninstalled")


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    rec = _Recorder()

    def install(_cluster: Any, namespace: str, _work: Path) -> _Recorder:
        rec.calls.append(f"operator installed in {namespace}")
        return rec

    def save_logs(_cluster: Any, namespace: str, into: Path) -> None:
        rec.calls.append(f"logs of {namespace} saved to {into.name}")

    monkeypatch.setattr(clusters, "local_cluster", lambda _node: rec)
    monkeypatch.setattr(localnode, "provide_volumes", lambda _c, sizes: rec.calls.append(
        f"broker volumes {sizes}"))  # fmt: skip
    monkeypatch.setattr(releases, "install", install)
    monkeypatch.setattr(pods, "save_logs", save_logs)
    monkeypatch.setattr(sparkoperator, "Helm", lambda _operator: rec)
    return rec


SETUP = ["crds", "broker volumes ['2Gi']", "pvs 1 1Gi", "operator installed in ns"]
END = ["kubectl delete hutch --all", "operator uninstalled"]


def test_a_run_that_ends_well_removes_the_hutch_objects_then_the_operator(
    recorder: _Recorder, tmp_path: Path
) -> None:
    with sparkpods.on_node(recorder, "ns", tmp_path) as setup:
        assert setup.volume == "pv-0" and setup.operator is recorder
        recorder.calls.append("run")
    assert recorder.calls == [*SETUP, "run", *END]


def _fail_inside(
    setup: contextlib.AbstractContextManager[Any], calls: list[str], *cleanups: str
) -> None:
    """Enter ``setup``, add a cleanup per name (each writes its name down), then fail as a
    test would."""
    with setup as run:
        for name in cleanups:
            run.cleanups.append(lambda name=name: calls.append(name))
        raise RuntimeError("the job failed")


def test_a_failure_saves_the_pod_logs_first_and_still_cleans_up(
    recorder: _Recorder, tmp_path: Path
) -> None:
    setup = sparkpods.on_node(recorder, "ns", tmp_path)
    with pytest.raises(RuntimeError, match="the job failed"):
        _fail_inside(setup, recorder.calls, "first added", "last added")
    assert recorder.calls == [
        *SETUP,
        "logs of ns saved to pod-logs",
        "last added",
        "first added",
        *END,
    ]


def test_the_chart_run_saves_the_logs_before_it_uninstalls_the_spark_releases(
    recorder: _Recorder, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="the job failed"):
        _fail_inside(sparkoperator.on_node(recorder, "ns", tmp_path), recorder.calls)
    assert recorder.calls == [
        *SETUP,
        "logs of ns saved to pod-logs",
        "spark releases uninstalled",
        *END,
    ]
