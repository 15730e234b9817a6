"""A SIGKILL of the whole driver (JVM and Python workers) loses nothing.

Contract: docs/contracts/spark.md#required-tests.

The driver runs in a child process group (driver_child.py). It blocks inside foreachBatch of
batch 3 after recording it, so batch 3 is in Spark's offsets log but not in its commit log;
the parent then kills the group. The broker re-queues everything that was unacked, and a second
run with the same checkpoint finishes the queue. Neither run has a deadline: the test fails when
one shows no progress for STALL_S, and a run whose test is gone ends (childsession).

- Default mode: batch 3 replays empty and its messages come back later: nothing is missing and
  at most one batch is duplicated.
- Durable-batch mode: batch 3 replays identically from the batch log, and a sink that
  overwrites per batch id (batch-idempotent) ends with exactly the 1000 messages.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

CHILD = Path(__file__).with_name("driver_child.py")
TOTAL = 1000
BATCH = 100
HANG_AT = 3


def run_child(
    amqp: Any, queue: str, work: Path, *, run: int, durable: bool, extra: list[str]
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        str(CHILD),
        "--uri",
        amqp.url,
        "--queue",
        queue,
        "--checkpoint",
        str(work / "checkpoint"),
        "--out",
        str(work / "out"),
        "--run",
        str(run),
        *(["--durable"] if durable else []),
        *extra,
    ]
    log = (work / f"run{run}.log").open("wb")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def batches(out: Path, run: int) -> dict[int, list[list[Any]]]:
    return {
        int(path.stem.split("-")[-1]): json.loads(path.read_text())
        for path in out.glob(f"run{run}-batch-*.json")
    }


def log_tail(work: Path, run: int) -> str:
    return (work / f"run{run}.log").read_text(errors="replace")[-3000:]


# No sign of progress for this long: the run is stuck, not slow. Its signs, in order: the log
# while the JVM starts, the checkpoint's metadata, each batch's offsets, record and commit.
# Total bounds (180 s to run 1's batch 3, 240 s for run 2) counted the JVM's start and every
# batch, which a loaded machine stretches (the stream kill test's failed a healthy run at load
# 20); the spark marker's pytest timeout stays the outer guard.
STALL_S = 120


def progress(work: Path, run: int) -> tuple[int, ...]:
    """What grows while a run gets on: its log's size and its checkpoint's and records' files."""
    files = [sum(1 for _ in (work / name).rglob("*")) for name in ("checkpoint", "out")]
    return ((work / f"run{run}.log").stat().st_size, *files)


def wait_progressing(
    child: subprocess.Popen[bytes], work: Path, run: int, what: str, reached: Callable[[], bool]
) -> None:
    """Waits until `reached()` holds, failing when the run exits before or shows no progress
    for STALL_S."""
    seen, since = progress(work, run), time.monotonic()
    while not reached():
        assert child.poll() is None, f"run {run} exited before {what}:\n{log_tail(work, run)}"
        now = progress(work, run)
        if now != seen:
            seen, since = now, time.monotonic()
        assert time.monotonic() - since < STALL_S, (
            f"run {run} never reached {what}: no progress for {STALL_S} s (log size, "
            f"checkpoint and record files {now}):\n{log_tail(work, run)}"
        )
        time.sleep(0.2)


def end_group(child: subprocess.Popen[bytes]) -> None:
    """Kills what is left of a run's process group (its JVM and Python workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait(30)


# Durable mode does not depend on the broker, so only hutch-broker runs it (each case ~45 s).
@pytest.mark.parametrize(
    ("broker", "durable"),
    [("hutch", False), ("rabbitmq", False), ("hutch", True)],
    ids=["hutch-default", "rabbitmq-default", "hutch-durable"],
    indirect=["broker"],
)
def test_driver_sigkill_loses_nothing(
    amqp: Any, broker: Any, tmp_path: Path, waiter: Any, durable: bool
) -> None:
    queue = amqp.queue("kill")
    ids = amqp.publish(queue, TOTAL)
    (tmp_path / "out").mkdir()

    first = run_child(
        amqp, queue, tmp_path, run=1, durable=durable, extra=["--hang-at", str(HANG_AT)]
    )
    hang = tmp_path / "out" / f"hang-{HANG_AT}"
    try:
        wait_progressing(first, tmp_path, 1, f"batch {HANG_AT}", hang.exists)
    finally:
        end_group(first)

    run1 = batches(tmp_path / "out", 1)
    acked = sum(len(run1[b]) for b in range(HANG_AT + (1 if durable else 0)))
    waiter("the killed consumer gone", lambda: amqp.consumers(queue) == 0, 30)
    assert amqp.ready(queue) == TOTAL - acked  # nothing stays unacked after the kill

    second = run_child(
        amqp, queue, tmp_path, run=2, durable=durable, extra=["--expect", str(TOTAL)]
    )
    try:  # run 2 ends by itself once every id is recorded
        wait_progressing(second, tmp_path, 2, "its end", lambda: second.poll() is not None)
    finally:
        end_group(second)
    assert second.returncode == 0, f"run 2 failed:\n{log_tail(tmp_path, 2)}"
    run2 = batches(tmp_path / "out", 2)

    everything = [row[0] for run in (run1, run2) for rows in run.values() for row in rows]
    assert set(everything) == set(ids)  # nothing lost
    if durable:
        assert run2[HANG_AT] == run1[HANG_AT]  # the replay is identical
        latest = {**run1, **run2}  # a sink that overwrites per batch id
        final = [row[0] for rows in latest.values() for row in rows]
        assert sorted(final) == sorted(ids)
    else:
        assert run2[HANG_AT] == []  # replays empty: the broker re-queued it
        assert len(everything) - len(set(everything)) <= BATCH
    waiter("run 2's consumer gone", lambda: amqp.consumers(queue) == 0, 30)
    assert amqp.ready(queue) == 0
