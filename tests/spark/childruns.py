"""A kill test's child run, waited on by its progress rather than by a total bound.

Why: the driver-kill tests (test_driver_kill.py, test_streamdriver.py) start the Spark driver
they kill as a child and run it until it reaches a point; a run after it is a query in the
test's own session (reruns.py). Total bounds (180 s to run 1's
point, 240 s for run 2) counted the JVM's start and every batch, which a loaded machine
stretches: the stream test's failed a healthy run at load 20. A run that shows no sign of
progress for ``STALL_S`` is stuck, not slow. Its signs, in order: the log while the JVM starts,
the checkpoint's metadata, each batch's offsets and commit, the output's files (a
``hutch_testing.progress.Watch``). The spark marker's pytest timeout stays the outer guard.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hutch_testing.progress import Watch, wait_until

STALL_S = 120.0


def log_tail(work: Path, run: int) -> str:
    """The end of run ``run``'s log (``run<N>.log`` in ``work``)."""
    return (work / f"run{run}.log").read_text(errors="replace")[-3000:]


def progress(work: Path, run: int, dirs: Sequence[str]) -> tuple[int, ...]:
    """What grows while a run gets on: its log's size and the files under each of ``dirs``."""
    files = [sum(1 for _ in (work / name).rglob("*")) for name in dirs]
    return ((work / f"run{run}.log").stat().st_size, *files)


def wait_progressing(
    child: subprocess.Popen[bytes],
    work: Path,
    run: int,
    what: str,
    reached: Callable[[], bool],
    dirs: Sequence[str],
) -> None:
    """Waits until ``reached()`` holds, failing when the run exits before or shows no progress
    (its log and the files under ``dirs``) for STALL_S; a stall's message ends with the log."""

    def alive() -> None:
        if child.poll() is not None:
            pytest.fail(f"run {run} exited before {what}:\n{log_tail(work, run)}")

    watch = Watch(
        f"run {run}, waiting for {what}",
        f"log size and files under {', '.join(dirs)}",
        lambda: progress(work, run, dirs),
        STALL_S,
    )
    try:
        wait_until(reached, watch, also=alive)
    except AssertionError as stalled:  # the watch's: the log tells where the run stopped
        raise AssertionError(f"{stalled}:\n{log_tail(work, run)}") from None


def end_group(child: subprocess.Popen[bytes]) -> None:
    """Kills what is left of a run's process group (its JVM and Python workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait(30)
