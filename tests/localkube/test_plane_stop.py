"""The order a plane stops in (hutch_localkube.planes.Plane.stop), without starting one.

Why: the node's Pods must die before the control plane stops. With the node tier's processes
stopped but its Pods alive, an operator Pod's open watches kept kube-apiserver's graceful
shutdown waiting until the 10 s SIGKILL, at the end of every make run and node test session.
And a failing node cleanup must still stop the control plane.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hutch_localkube import planes, supervision

STARTED = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
           "coredns", "containerd", "kubelet", "kube-proxy"]  # fmt: skip


class _Proc:
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls


def _plane(tmp_path: Path, calls: list[str], cleanup_fails: bool = False) -> planes.Plane:
    plane = planes.Plane.__new__(planes.Plane)
    plane.tier, plane.run_dir, plane.stopped, plane.failed = "node", tmp_path, False, False
    plane.components = [planes.Component(n, n, _Proc(n, calls)) for n in STARTED]  # type: ignore[arg-type]

    def stop_node() -> list[str]:
        calls.append("node cleanup")
        if cleanup_fails:
            raise OSError("umount failed")
        return []

    plane._stop_node = stop_node  # type: ignore[method-assign]
    return plane


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(supervision, "stop_child", lambda proc: seen.append(proc.name))
    monkeypatch.setattr(supervision, "remove_run", lambda _run: seen.append("remove run"))
    return seen


def test_the_node_and_its_pods_go_before_the_control_plane(tmp_path: Path, calls: list[str]):
    _plane(tmp_path, calls).stop()
    assert calls == ["kube-proxy", "kubelet", "containerd", "coredns", "node cleanup", "kwok",
                     "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd",
                     "remove run"]  # fmt: skip


def test_a_failed_node_cleanup_still_stops_the_control_plane(tmp_path: Path, calls: list[str]):
    with pytest.raises(OSError, match="umount"):
        _plane(tmp_path, calls, cleanup_fails=True).stop()
    assert calls[-5:] == ["kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver",
                          "etcd"]  # fmt: skip
