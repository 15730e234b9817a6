"""scripts/background-build.sh as scripts/test.sh uses it: the Go builds in the background, the
wait before broker/serial, a failed build stopping the run loudly, and no build process left
behind when the run stops early (a failed level, Ctrl-C).

Why: cold, the builds run for about 17 minutes beside the fast and the broker levels; a failure
must not turn into skipped node tests, and a run that stops must not leave compilers running on
the machine. The real build scripts run here with a stand-in Go (GO=) and a cache of their own
(HUTCH_CACHE=), made complete beforehand where the build is to succeed, so nothing is compiled:
the stand-in only answers ``go env`` (after a delay where a build is to take time).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hutch_localkube import binaries
from hutch_testing import backgroundbuild

pytestmark = pytest.mark.broker  # level broker: runs the build scripts and a shell

REPO = binaries.REPO_ROOT
GOBUILD = binaries.GO_BUILD
# What scripts/test.sh does around the build, and hooks: BEFORE_WAIT runs before the wait.
DRIVER = r"""
set -euo pipefail
cd "$REPO"
source scripts/background-build.sh
TIMES=()
finish() {
  local status=$?
  bg_build_stop || status=$?
  printf "time: %s\n" "${TIMES[@]}"
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT TERM
bg_build_start
echo "started $HUTCH_BACKGROUND_BUILD"
eval "${BEFORE_WAIT:-}"
bg_build_wait
echo "after the wait: HUTCH_BACKGROUND_BUILD=${HUTCH_BACKGROUND_BUILD:-}"
"""
FAKE_GO = """#!/bin/sh
# go env only, as build-binaries.sh and build-spark-operator.sh ask it of a complete cache.
[ "$1" = env ] || { echo "fake go: $*" >&2; exit 3; }
case "$2" in
GOVERSION) sleep "${FAKE_GO_DELAY:-0}"; echo go1.26.8 ;;
GOOS) echo linux ;;
GOARCH) echo amd64 ;;
*) exit 3 ;;
esac
"""

HELM_WAIT = (
    '"$PY" -c "from hutch_testing import backgroundbuild as b; '
    "print('helm at', b.bin_dir() / 'helm')\""
)


def complete_cache(cache: Path) -> None:
    """A cache both scripts take as complete for the stand-in's go1.26.8 linux-amd64."""
    pins = binaries.pinned_versions()
    name = (
        f"k8s-{pins['k8s']}_etcd-{pins['etcd']}_kwok-{pins['kwok']}_helm-{pins['helm']}"
        "_go1.26.8_linux-amd64"
    )
    bins = cache / "k8s-bins" / name / "bin"
    bins.mkdir(parents=True)
    for binary in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
                   "kube-proxy", "etcd", "kwok", "helm", "coredns"):  # fmt: skip
        (bins / binary).write_text("#!/bin/sh\n")
        (bins / binary).chmod(0o755)
    main = (GOBUILD / "coredns" / "main.go").read_bytes()
    (bins / ".coredns.key").write_text(f"{pins['coredns']}-{hashlib.sha256(main).hexdigest()[:16]}")
    (bins.parent / ".complete").touch()
    spark = GOBUILD / "build-spark-operator.sh"
    version = next(
        line.split("=", 1)[1]
        for line in spark.read_text().splitlines()
        if line.startswith("SPARK_OPERATOR_VERSION=")
    )
    operator = cache / "spark-operator" / f"{version}_go1.26.8_linux-amd64"
    operator.mkdir(parents=True)
    (operator / ".complete").touch()


def environment(tmp_path: Path, go: str, **extra: str) -> dict[str, str]:
    fake = tmp_path / "go"
    fake.write_text(FAKE_GO)
    fake.chmod(0o755)
    return {
        **os.environ,
        "REPO": str(REPO),
        "PY": sys.executable,
        "GO": str(fake) if go == "fake" else go,
        "HUTCH_CACHE": str(tmp_path / "cache"),
        "BG_BUILD_ROOT": str(tmp_path / "runs"),
        "HUTCH_BUILD_PROGRESS_EVERY": "1",
        **extra,
    }


def groups_left(tmp_path: Path) -> list[int]:
    """The process groups of every build started under tmp_path that still have a member."""
    groups = [int(pid.read_text()) for pid in (tmp_path / "runs").glob("background-build-*/pid")]
    return [pgid for pgid in groups if backgroundbuild.group_alive(pgid)]


def test_the_wait_prints_progress_and_the_times_and_helm_waits_for_the_kubernetes_step(
    tmp_path: Path,
) -> None:
    complete_cache(tmp_path / "cache")
    env = environment(tmp_path, "fake", FAKE_GO_DELAY="5", BEFORE_WAIT=HELM_WAIT)
    done = subprocess.run(
        ["bash", "-c", DRIVER], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"helm at {tmp_path / 'cache' / 'k8s-bins'}" in out, out
    assert "==> waiting for the background build: building spark-operator for " in out, out
    assert "    waited " in out and ": building spark-operator for " in out, out
    assert "==> background build done in " in out, out
    assert "after the wait: HUTCH_BACKGROUND_BUILD=\n" in out, out
    times = [line for line in out.splitlines() if line.startswith("time: ")]
    assert [line.split()[1] for line in times] == ["build", "build"], times
    assert times[0].endswith("(exit 0, in the background)"), times
    assert times[1].startswith("time: build wait "), times
    assert list((tmp_path / "runs").iterdir()) == [], "the build's directory is left after success"


@pytest.mark.parametrize("where", ["at the wait", "in a chart test"])
def test_a_failed_build_stops_the_run_with_its_log_and_exit_code(
    tmp_path: Path, where: str
) -> None:
    """At the wait, or before it: a chart test waiting for helm fails with the build, so the
    broker level fails, and the run's end reports the build as the wait would have."""
    before_wait = HELM_WAIT if where == "in a chart test" else ""
    env = environment(tmp_path, "/nonexistent/go", BEFORE_WAIT=before_wait)
    done = subprocess.run(
        ["bash", "-c", DRIVER], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "after the wait" not in done.stdout
    err = done.stderr
    if where == "in a chart test":
        assert "BackgroundBuildError: the background build's k8s-bins step failed (exit 2)" in err
        assert "helm at" not in done.stdout
    assert "==> the background build FAILED (exit 2) after " in err, err
    assert "build-binaries: no Go toolchain found (set GO=/path/to/go)" in err, err
    assert "background-build: step k8s-bins: exit 2" in err, err
    assert "==> the background build FAILED (exit 2): the node level cannot run" in err, err
    times = [line for line in done.stdout.splitlines() if line.startswith("time: build ")]
    assert times[0].endswith("(exit 2, in the background)"), done.stdout
    (log,) = (tmp_path / "runs").glob("background-build-*/build.log")  # kept for the reader
    assert "step spark-operator" not in log.read_text()
    assert groups_left(tmp_path) == []


@pytest.mark.parametrize("stop", ["interrupt", "failed level"])
def test_a_run_that_stops_early_leaves_no_build_process(tmp_path: Path, stop: str) -> None:
    complete_cache(tmp_path / "cache")
    go_on = tmp_path / "fail-now"  # the level fails only once the build is seen running
    failing = f"until [ -e {go_on} ]; do sleep 0.05; done; echo level failed; false"
    before_wait = "sleep 300" if stop == "interrupt" else failing
    env = environment(tmp_path, "fake", FAKE_GO_DELAY="300", BEFORE_WAIT=before_wait)
    driver = subprocess.Popen(  # SIGINT as a terminal's shell has it, even if ours ignores it
        ["env", "--default-signal=INT", "bash", "-c", DRIVER], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert driver.stdout is not None
        started = ""
        while not started.startswith("started "):
            started = driver.stdout.readline()
            assert started, "the driver ended before it started the build"
        build_dir = Path(started.split()[1])
        log = build_dir / "build.log"
        deadline = time.monotonic() + 60
        while "step k8s-bins: start" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the build never started its first step"
            time.sleep(0.1)
        assert groups_left(tmp_path) != []
        if stop == "interrupt":  # Ctrl-C: the terminal signals the run's process group
            os.killpg(driver.pid, signal.SIGINT)
        else:  # a level that failed at once could stop the build before it was seen running
            go_on.touch()
        out, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        left = groups_left(tmp_path)
        for pgid in left:  # a failed test must not leave a build behind either
            os.killpg(pgid, signal.SIGKILL)
    assert left == []
    assert driver.returncode == (130 if stop == "interrupt" else 1), out + err
    assert "==> stopping the background build (process group " in err, err
    assert "(stopped)" in out, out


CHILD_TEST = """
import os
from pathlib import Path

import pytest
from hutch_testing import backgroundbuild

Path(os.environ["HUTCH_BACKGROUND_BUILD"], "collected").touch()


@pytest.mark.helm
@pytest.mark.timeout(2)
def test_a_helm_test_s_timeout_starts_after_the_wait():
    backgroundbuild.wait_for_k8s_bins()  # what the helm lookups do (bin_dir): at once by now
"""


def test_a_test_that_runs_helm_waits_for_the_build_outside_its_timeout(tmp_path: Path) -> None:
    """Cold, helm is ready minutes after the broker level starts, and its tests have 60 s: the
    plugin waits before the test's protocol, so its timeout (2 s here) starts after the wait
    (3 s here). The build is a stand-in: its directory, with this process's group as its own."""
    build = tmp_path / "build"
    build.mkdir()
    (build / "pid").write_text(str(os.getpgid(0)))
    (tmp_path / "test_child.py").write_text(CHILD_TEST)
    env = {**os.environ, "HUTCH_BACKGROUND_BUILD": str(build)}
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "hutch_testing.backgroundbuild", "-p",
         "no:cacheprovider", "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_child.py")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (build / "collected").exists():
            assert child.poll() is None, child.communicate()[0]
            assert time.monotonic() < deadline, "the child pytest never collected its test"
            time.sleep(0.1)
        time.sleep(3)  # longer than the test's timeout: a wait inside it would time out
        # As background-build.sh writes it: whole, by a rename. A plain write raced the
        # child's poll once (an empty file read between its creation and its bytes, CI).
        (build / "k8s-bins.rc.tmp").write_text("0\n")
        os.replace(build / "k8s-bins.rc.tmp", build / "k8s-bins.rc")
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, out
    assert "1 passed" in out, out
