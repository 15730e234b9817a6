"""hutch_testing.backgroundbuild's pure part: the wait's progress line from the build's log, and
a step's status from the build's files (scripts/background-build.sh writes both).

The shell itself (start, wait, failure, Ctrl-C) is checked by test_background_build.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hutch_testing import backgroundbuild
from hutch_testing.backgroundbuild import BackgroundBuildError, progress_line, step_status

# The head of a cold build's log as scripts/background-build.sh stamps it (seconds, then text).
COLD = """\
0 background-build: step k8s-bins: start
0 build-binaries: phase k8s-modules: start
1 go: downloading k8s.io/kubernetes v1.36.4
13 build-binaries: k8s.io/kubernetes@v1.36.4 commit=abc staging-modules=31
13 phase=k8s-modules seconds=13
13 build-binaries: phase kube-apiserver: start
"""


def test_the_line_names_the_kubernetes_phase_and_how_long_it_has_run() -> None:
    assert progress_line(COLD, 108) == (
        "building k8s-bins (kube-apiserver) for 95 s, build running 108 s; "
        "last line: build-binaries: phase kube-apiserver: start"
    )


def test_the_spark_operator_step_replaces_the_last_kubernetes_phase() -> None:
    log = COLD + (
        "804 phase=total seconds=804\n"
        "804 background-build: step k8s-bins: exit 0\n"
        "804 background-build: step spark-operator: start\n"
        "811 build-spark-operator: github.com/kubeflow/spark-operator/v2@v2.3.0 commit=x\n"
    )
    assert progress_line(log, 900) == (
        "building spark-operator for 96 s, build running 900 s; last line: "
        "build-spark-operator: github.com/kubeflow/spark-operator/v2@v2.3.0 commit=x"
    )


def test_an_empty_log_says_so() -> None:
    assert progress_line("", 3) == "build running 3 s, nothing logged yet"


def test_a_partial_last_line_is_the_last_line_but_moves_no_phase() -> None:
    line = progress_line(COLD + "140 build-binaries: phase kube-controller-manager: st", 150)
    assert line.startswith("building k8s-bins (kube-apiserver) for 137 s,"), line
    assert line.endswith("last line: build-binaries: phase kube-controller-manager: st"), line
    unstamped = progress_line(COLD + "# github.com/x\n", 20)
    assert unstamped.endswith("last line: # github.com/x"), unstamped


def test_a_long_last_line_is_cut_to_a_hundred_characters() -> None:
    line = progress_line(COLD + "20 " + "x" * 300 + "\n", 20)
    assert line.endswith("last line: " + "x" * 97 + "..."), line


def test_a_step_s_exit_code_is_read_once_it_is_written(tmp_path: Path) -> None:
    assert step_status(tmp_path, "k8s-bins", lambda: True) is None
    (tmp_path / "k8s-bins.rc").write_text("0\n")
    assert step_status(tmp_path, "k8s-bins", lambda: False) == 0
    (tmp_path / "spark-operator.rc").write_text("2\n")
    assert step_status(tmp_path, "spark-operator", lambda: False) == 2


def test_a_build_that_ended_before_the_step_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "rc").write_text("1 30\n")
    with pytest.raises(BackgroundBuildError, match=r"ended \(exit 1\) before its spark-operator"):
        step_status(tmp_path, "spark-operator", lambda: False)


def test_a_build_gone_without_any_status_is_a_failure(tmp_path: Path) -> None:
    with pytest.raises(BackgroundBuildError, match="without a status"):
        step_status(tmp_path, "k8s-bins", lambda: False)


def test_the_helm_wait_reads_the_kubernetes_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(backgroundbuild.ENV, raising=False)
    backgroundbuild.wait_for_k8s_bins()  # no background build: nothing to wait for
    monkeypatch.setenv(backgroundbuild.ENV, str(tmp_path))
    (tmp_path / "k8s-bins.rc").write_text("0\n")
    backgroundbuild.wait_for_k8s_bins()
    (tmp_path / "k8s-bins.rc").write_text("2\n")
    with pytest.raises(BackgroundBuildError, match=r"k8s-bins step failed \(exit 2\)"):
        backgroundbuild.wait_for_k8s_bins()


def test_the_command_line_prints_the_line_or_its_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "build.log"
    log.write_text(COLD)
    assert backgroundbuild.main(["progress", str(log), "108"]) == 0
    assert capsys.readouterr().out.startswith("building k8s-bins (kube-apiserver) for 95 s,")
    assert backgroundbuild.main(["progress", str(tmp_path / "absent.log"), "5"]) == 0
    assert capsys.readouterr().out == "build running 5 s, nothing logged yet\n"
    assert backgroundbuild.main(["progress", str(log)]) == 2
    assert "usage:" in capsys.readouterr().err
