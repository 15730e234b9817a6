"""scripts/test-levels.sh as scripts/test.sh uses it for the node level: one pytest in the
background beside one in the foreground, with a stand-in pytest (PY) that does what each case
needs, so no test runs and no plane starts.

Why: the two run for up to 20 minutes at once. A failure in the background one must show at
once, not only when the foreground one ends, without stopping the foreground one (its results
still matter), and it must fail the run and be named in the summary; Ctrl-C must leave a summary
with both levels' lines, as a normal end does (before, the foreground's line was missing).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hutch_localkube import binaries

pytestmark = pytest.mark.broker  # level broker: runs a shell and Python children

REPO = binaries.REPO_ROOT
# What scripts/test.sh does around its levels, the node level's two as it runs them.
DRIVER = r"""
set -euo pipefail
source "$REPO/scripts/test-levels.sh"
PY=$FAKE_PY
trap 'status=$?; summary; exit "$status"' EXIT
trap interrupted INT TERM
level_beside node/control -m background
level node+e2e -m foreground
echo "after the levels"
"""
# As scripts/test.sh runs the node level's background one: from before the serial pass, at a
# light CPU weight while that pass runs, then even beside node+e2e.
SPANNING = DRIVER.replace(
    "level node+e2e -m foreground\n",
    "beside_until node+e2e\nbeside_weight 128\nlevel broker/serial -m middle\n"
    "beside_weight 1024\nlevel node+e2e -m foreground\n",
)
# The stand-in for `python -m pytest`: its side from -m; it marks that it started, and then, by
# the environment: waits for a text in the run's output, or for Ctrl-C (KeyboardInterrupt: exit
# 2, as pytest), or exits at once; then exits with the code given.
FAKE = r"""
import os, sys, time
from pathlib import Path

def weight():  # this process's cgroup v1 cpu.shares, or none outside a group of its own
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") and path.rstrip("/"):
            return Path(f"/sys/fs/cgroup/cpu{path}/cpu.shares").read_text().strip()
    return "none"

side = sys.argv[sys.argv.index("-m") + 1]
Path(os.environ["STARTED"], side).touch()
print(f"{side} started", flush=True)
awaits, hold = os.environ.get(f"{side}_AWAITS"), os.environ.get(f"{side}_HOLDS")
try:  # AWAITS: texts, "|" between them, waited for in turn
    for awaited in awaits.split("|") if awaits else [None]:
        for _ in range(600):  # at most 60 s, then exit 99: the test fails with what it awaited
            said = Path(os.environ["OUT"]).read_text() + Path(os.environ["SAID"]).read_text()
            if awaited and awaited in said:
                line = f"{side} saw it at weight {weight()}"
                print(line, flush=True)
                with open(os.environ["SAID"], "a") as also:  # the background's output is
                    also.write(line + "\n")  # in its own file until it ends
                break
            if not awaited and not hold:
                break
            time.sleep(0.1)
        else:
            print(f"{side} waited in vain", flush=True)
            sys.exit(99)
except KeyboardInterrupt:
    print(f"{side} interrupted", flush=True)
    sys.exit(2)
sys.exit(int(os.environ.get(f"{side}_EXIT", "0")))
"""
SAID_AT_ONCE = "==> level node/control FAILED in the background: exit 1 after"


def start(
    tmp_path: Path, driver: str = DRIVER, **behaviour: str
) -> tuple[subprocess.Popen[str], Path]:
    """The driver in a process group of its own (as a terminal starts a command), SIGINT as a
    terminal's shell has it; its output goes to a file the stand-ins can read."""
    fake = tmp_path / "fake_pytest.py"
    fake.write_text(FAKE)
    (tmp_path / "said.txt").touch()
    (tmp_path / "started").mkdir()
    out = tmp_path / "out.txt"
    env = {
        **os.environ,
        "REPO": str(REPO),
        "FAKE_PY": str(tmp_path / "py"),
        "STARTED": str(tmp_path / "started"),
        "OUT": str(out),
        "SAID": str(tmp_path / "said.txt"),
        "TMPDIR": str(tmp_path),
        **behaviour,
    }
    (tmp_path / "py").write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{fake}" "$@"\n')
    (tmp_path / "py").chmod(0o755)
    with out.open("w") as sink:
        driver = subprocess.Popen(
            ["env", "--default-signal=INT", "bash", "-c", driver],
            env=env, text=True, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    return driver, out


def finish(driver: subprocess.Popen[str], out: Path) -> str:
    try:
        driver.wait(timeout=90)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    return out.read_text()


def wait_for(out: Path, text: str, driver: subprocess.Popen[str]) -> None:
    while text not in out.read_text():
        assert driver.poll() is None, f"the run ended before {text!r}:\n{out.read_text()}"
        time.sleep(0.05)


def times(output: str) -> dict[str, str]:
    """The summary's lines by level: name -> what follows its seconds."""
    summary = output.split("==> level times\n", 1)[1]
    lines = [line.split() for line in summary.splitlines() if line.startswith("    ")]
    return {words[0]: " ".join(words[3:]) for words in lines}


def test_a_background_failure_is_said_at_once_and_named_and_fails_the_run(
    tmp_path: Path,
) -> None:
    # The foreground ends only once the line is out: it came while the foreground still ran.
    driver, out = start(tmp_path, background_EXIT="1", foreground_AWAITS=SAID_AT_ONCE)
    output = finish(driver, out)
    assert driver.returncode == 1, output
    assert output.count(SAID_AT_ONCE) == 1, output
    assert "foreground saw it" in output
    assert times(output) == {
        "node+e2e": "(exit 0)",
        "node/control": "(exit 1, in the background)",
        "both": "(node+e2e and node/control at once)",
    }, output
    assert output.rstrip().endswith("==> failed: node/control (exit 1, in the background)")
    assert "after the levels" not in output


def test_both_failing_are_both_named_and_the_run_exits_with_the_foreground_s_code(
    tmp_path: Path,
) -> None:
    driver, out = start(
        tmp_path, background_EXIT="1", foreground_AWAITS=SAID_AT_ONCE, foreground_EXIT="3"
    )
    output = finish(driver, out)
    assert driver.returncode == 3, output
    assert output.rstrip().endswith(
        "==> failed: node+e2e (exit 3), node/control (exit 1, in the background)"
    ), output


def test_no_test_selected_in_the_background_is_no_failure(tmp_path: Path) -> None:
    driver, out = start(tmp_path, background_EXIT="5")
    output = finish(driver, out)
    assert driver.returncode == 0, output
    assert "after the levels" in output
    assert "FAILED" not in output and "==> failed" not in output, output
    assert times(output)["node/control"] == "(exit 5, in the background)"


@pytest.mark.parametrize("background", ["running", "failed before"])
def test_ctrl_c_leaves_both_levels_lines_in_the_summary(tmp_path: Path, background: str) -> None:
    if background == "running":
        driver, out = start(tmp_path, background_HOLDS="1", foreground_HOLDS="1")
        wait_for(out, "==> level node+e2e: pytest", driver)
        while len(list((tmp_path / "started").iterdir())) < 2:
            assert driver.poll() is None, out.read_text()
            time.sleep(0.05)
    else:
        driver, out = start(tmp_path, background_EXIT="1", foreground_HOLDS="1")
        wait_for(out, SAID_AT_ONCE, driver)
    os.killpg(driver.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the process group
    output = finish(driver, out)
    assert driver.returncode == 130, output
    assert "foreground interrupted" in output
    lines = times(output)
    assert lines["node+e2e"] == "(exit 2, interrupted)", output
    assert lines["both"] == "(node+e2e and node/control at once)", output
    if background == "running":  # stopped with the foreground: no failure said or named
        assert "background interrupted" in output
        assert lines["node/control"] == "(exit 2, in the background, interrupted)", output
        assert "FAILED" not in output and "==> failed" not in output, output
    else:
        assert lines["node/control"] == "(exit 1, in the background)", output
        assert output.rstrip().endswith("==> failed: node/control (exit 1, in the background)")


def test_a_level_beside_two_runs_light_beside_the_first_and_even_beside_the_second(
    tmp_path: Path,
) -> None:
    """The background level, started before the serial pass, is still running when node+e2e
    starts and is joined only at its end; its processes weigh 128 while the serial pass runs
    (it saw the pass start at that weight), 1024 beside node+e2e, and the group is gone after."""
    driver, out = start(
        tmp_path, SPANNING, middle_AWAITS="background saw it at weight 128",
        background_AWAITS="middle started|foreground started",
        foreground_AWAITS="background saw it at weight 1024",
    )  # fmt: skip
    output = finish(driver, out)
    assert driver.returncode == 0, output
    assert "after the levels" in output
    assert output.index("==> level broker/serial: pytest") < output.index("foreground started")
    assert output.index("foreground saw it") < output.index(
        "==> level node/control, which ran in the background: exit 0"
    ), output
    assert times(output) == {
        "broker/serial": "(exit 0)",
        "node+e2e": "(exit 0)",
        "node/control": "(exit 0, in the background)",
        "both": "(node+e2e and node/control at once)",
    }, output
    assert not list(Path("/sys/fs/cgroup/cpu").glob(f"**/hutch-level-{driver.pid}")), output


def test_a_failing_first_level_stops_the_run_with_the_one_beside_it_joined(
    tmp_path: Path,
) -> None:
    driver, out = start(tmp_path, SPANNING, middle_EXIT="1")
    output = finish(driver, out)
    assert driver.returncode == 1, output
    assert "foreground started" not in output and "after the levels" not in output, output
    assert times(output) == {
        "broker/serial": "(exit 1)",
        "node/control": "(exit 0, in the background)",
        "both": "(broker/serial and node/control at once)",
    }, output
    assert output.rstrip().endswith("==> failed: broker/serial (exit 1)"), output


def sourced(script: str, **env: str) -> str:
    """SCRIPT run in bash with scripts/test-levels.sh sourced; its output (it must exit 0)."""
    done = subprocess.run(
        ["bash", "-c", f'set -euo pipefail; source "$REPO/scripts/test-levels.sh"; {script}'],
        env={**os.environ, "REPO": str(REPO), **env},
        text=True, capture_output=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_without_a_cgroup_the_even_weight_is_said_once_a_run() -> None:
    """scripts/test.sh calls beside_weight twice (128, then 1024): one notice, not two."""
    output = sourced("BESIDE_NAME=node/control; beside_weight 128; beside_weight 1024")
    assert output == (
        "==> no cgroup v1 cpu group for level node/control: its CPU weight stays the default\n"
    )


def own_cpu_group() -> str:
    """This process's cgroup v1 "cpu" path ("/" at the root), as beside_cgroup reads it."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    pytest.skip("no cgroup v1 cpu controller here: beside_cgroup makes no group")


def test_the_cpu_controller_is_found_where_it_is_mounted_with_others(tmp_path: Path) -> None:
    """Not only at /sys/fs/cgroup/cpu: "cpu,cpuacct" is a common mount; cpuset and cpuacct are
    other controllers, cgroup2 has no cpu.shares; without a cpu mount, no group."""
    mount = tmp_path / "cpu,cpuacct"
    mounts = tmp_path / "mounts"
    others = (
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
        f"cgroup {tmp_path}/cpuset cgroup rw,relatime,cpuset 0 0\n"
        f"cgroup {tmp_path}/cpuacct cgroup rw,relatime,cpuacct 0 0\n"
        f"tmpfs {tmp_path}/cpu tmpfs rw,relatime,cpu 0 0\n"
    )
    mounts.write_text(others + f"cgroup {mount} cgroup rw,nosuid,relatime,cpu,cpuacct 0 0\n")
    (tmp_path / "others").write_text(others)
    others_path = tmp_path / "others"
    parent = Path(f"{mount}{own_cpu_group().rstrip('/')}")
    parent.mkdir(parents=True)
    both = f'cpu_mount "{mounts}"; beside_cgroup "{mounts}"'
    output = sourced(
        f'{both}; cpu_mount "$OTHERS"; beside_cgroup "$OTHERS"', OTHERS=str(others_path)
    )
    [found, group] = output.splitlines()
    assert found == str(mount)
    assert group.startswith(f"{parent}/hutch-level-") and Path(group).is_dir(), output


def test_groups_left_by_killed_runs_are_removed_and_no_live_run_s(tmp_path: Path) -> None:
    """A run killed by SIGKILL never reaches beside_join's rmdir: the next one removes its group
    if its pid is gone and no process is in it; a live run's group, or one still holding a
    process, stays."""
    mount = tmp_path / "cpu"
    (tmp_path / "mounts").write_text(f"cgroup {mount} cgroup rw,relatime,cpu 0 0\n")
    parent = Path(f"{mount}{own_cpu_group().rstrip('/')}")
    gone = [subprocess.Popen(["true"]) for _ in range(2)]
    for process in gone:
        process.wait()
    left = parent / f"hutch-level-{gone[0].pid}"
    holding = parent / f"hutch-level-{gone[1].pid}"
    live = parent / f"hutch-level-{os.getpid()}"
    other = parent / "someone-else"
    for group in (left, holding, live, other):
        group.mkdir(parents=True)
    (holding / "cgroup.procs").write_text("1\n")
    (live / "cgroup.procs").touch()
    output = sourced(f'beside_cgroup "{tmp_path / "mounts"}"')
    assert not left.exists()
    assert holding.is_dir() and live.is_dir() and other.is_dir()
    assert output.strip().startswith(f"{parent}/hutch-level-"), output
