"""The killed run of the SIGKILL test: a streaming driver run as its own process (never
collected by pytest).

Why one process for every case: a driver's start (a JVM and its Python workers) was most of
each case's time, and the kill proves each case alike. Each ``--case NAME URI QUEUE MODE``
(MODE ``default`` or ``durable``) is a query of its own in this driver, reading its queue with
the `hutch` source into ``<work>/<NAME>/out/run1-batch-<id>.json`` (write, fsync, rename), its
checkpoint in ``<work>/<NAME>/checkpoint``. After recording batch N, the first from ``--hang-at``
on that comes after a batch that read messages, a query writes ``<out>/hang-<N>`` and blocks
inside foreachBatch: that batch is in its offsets log but never in its commit log when the
parent kills the whole process group, and at least one batch with messages was committed before
it (batch 0 of a queue can be empty: its planning waits only `pollTimeoutMs` for a first
message). A query's foreachBatch runs on
its own thread, so one query's block does not hold the others back. The run has no deadline of
its own: it ends when its parent is gone (see childsession).
"""

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import childsession

BATCH = 100  # maxMessagesPerBatch


def write_atomically(path: Path, payload: object) -> None:
    temporary = path.with_suffix(".tmp")
    with temporary.open("w") as handle:
        json.dump(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)


def start_case(spark: Any, work: Path, case: list[str], hang_at: int) -> Any:
    """Starts one case's query, which records its batches and blocks at the first batch from
    ``hang_at`` on that comes after one with messages."""
    name, uri, queue, mode = case
    checkpoint, out = work / name / "checkpoint", work / name / "out"
    reader = (
        spark.readStream.format("hutch")
        .option("uri", uri)
        .option("queue", queue)
        .option("maxMessagesPerBatch", str(BATCH))
    )
    if mode == "durable":
        reader = reader.option("durableBatches", "true").option(
            "batchLogDir", f"{checkpoint}/hutch-batches"
        )

    read_before = False  # whether a batch before this one read messages

    def record(frame: Any, batch_id: int) -> None:
        nonlocal read_before
        rows = [[row.message_id, row.seq] for row in frame.select("message_id", "seq").collect()]
        write_atomically(out / f"run1-batch-{batch_id}.json", rows)
        if batch_id >= hang_at and read_before:
            (out / f"hang-{batch_id}").touch()
            time.sleep(600)
        read_before = read_before or bool(rows)

    return (
        reader.load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--case", nargs=4, action="append", required=True)
    parser.add_argument("--hang-at", type=int, required=True)
    args = parser.parse_args()

    spark = childsession.local_session()
    queries = childsession.Queries(
        [start_case(spark, args.work, case, args.hang_at) for case in args.case]
    )
    # Never done: it ends when killed, when a query fails or when its parent is gone.
    childsession.run_until(spark, queries, lambda: False)


if __name__ == "__main__":
    main()
