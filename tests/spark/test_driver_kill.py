"""A SIGKILL of the whole driver (JVM and Python workers) loses nothing.

Contract: docs/contracts/spark.md#required-tests.

The driver runs in a child process group (driver_child.py). It blocks inside foreachBatch of
batch 3 after recording it, so batch 3 is in Spark's offsets log but not in its commit log;
the parent then kills the group. The broker re-queues everything that was unacked, and a second
run with the same checkpoint finishes the queue. Neither run has a deadline: the test fails when
one shows no progress for `childruns.STALL_S`, and a run whose test is gone ends (childsession).

- Default mode: batch 3 replays empty and its messages come back later: nothing is missing and
  at most one batch is duplicated.
- Durable-batch mode: batch 3 replays identically from the batch log, and a sink that
  overwrites per batch id (batch-idempotent) ends with exactly the 1000 messages.
"""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.spark import childruns

pytestmark = pytest.mark.spark

CHILD = Path(__file__).with_name("driver_child.py")
TOTAL = 1000
BATCH = 100
HANG_AT = 3
# What grows under the run's work directory while it gets on (childruns.progress).
DIRS = ("checkpoint", "out")


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
        childruns.wait_progressing(first, tmp_path, 1, f"batch {HANG_AT}", hang.exists, DIRS)
    finally:
        childruns.end_group(first)

    run1 = batches(tmp_path / "out", 1)
    acked = sum(len(run1[b]) for b in range(HANG_AT + (1 if durable else 0)))
    waiter("the killed consumer gone", lambda: amqp.consumers(queue) == 0, 30)
    assert amqp.ready(queue) == TOTAL - acked  # nothing stays unacked after the kill

    second = run_child(
        amqp, queue, tmp_path, run=2, durable=durable, extra=["--expect", str(TOTAL)]
    )
    # run 2 ends by itself once every id is recorded
    childruns.run_to_end(second, tmp_path, 2, DIRS)
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
