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
# The stand-in for `python -m pytest`: its side from -m; it marks that it started, and then, by
# the environment: waits for a text in the run's output, or for Ctrl-C (KeyboardInterrupt: exit
# 2, as pytest), or exits at once; then exits with the code given.
FAKE = r"""
import os, sys, time
from pathlib import Path

side = sys.argv[sys.argv.index("-m") + 1]
Path(os.environ["STARTED"], side).touch()
print(f"{side} started", flush=True)
awaited, hold = os.environ.get(f"{side}_AWAITS"), os.environ.get(f"{side}_HOLDS")
try:
    for _ in range(600):  # at most 60 s, then exit 99: the test fails with what it waited for
        if awaited and awaited in Path(os.environ["OUT"]).read_text():
            print(f"{side} saw it", flush=True)
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


def start(tmp_path: Path, **behaviour: str) -> tuple[subprocess.Popen[str], Path]:
    """The driver in a process group of its own (as a terminal starts a command), SIGINT as a
    terminal's shell has it; its output goes to a file the stand-ins can read."""
    fake = tmp_path / "fake_pytest.py"
    fake.write_text(FAKE)
    (tmp_path / "started").mkdir()
    out = tmp_path / "out.txt"
    env = {
        **os.environ,
        "REPO": str(REPO),
        "FAKE_PY": str(tmp_path / "py"),
        "STARTED": str(tmp_path / "started"),
        "OUT": str(out),
        "TMPDIR": str(tmp_path),
        **behaviour,
    }
    (tmp_path / "py").write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{fake}" "$@"\n')
    (tmp_path / "py").chmod(0o755)
    with out.open("w") as sink:
        driver = subprocess.Popen(
            ["env", "--default-signal=INT", "bash", "-c", DRIVER],
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
