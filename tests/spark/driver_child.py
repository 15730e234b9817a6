"""A streaming driver for the SIGKILL test, run as its own process (never collected by pytest).

It consumes a queue with the `hutch` source and writes each micro-batch's rows to
`<out>/run<r>-batch-<id>.json` (write, fsync, rename), so the parent can see exactly what every
run processed. With `--hang-at N` it writes `hang-<N>` after recording batch N and then blocks
inside foreachBatch: batch N is in Spark's offsets log but never in its commit log when the
parent kills the whole process group. Without it, the run stops once every id in `--expect`
has been recorded by some run. Neither has a deadline of its own: each ends when its parent is
gone (see childsession).
"""

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import childsession


def write_atomically(path: Path, payload: object) -> None:
    temporary = path.with_suffix(".tmp")
    with temporary.open("w") as handle:
        json.dump(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)


def seen_ids(out: Path) -> set[str]:
    ids: set[str] = set()
    for path in out.glob("run*-batch-*.json"):
        ids.update(row[0] for row in json.loads(path.read_text()))
    return ids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--run", type=int, required=True)
    parser.add_argument("--hang-at", type=int, default=-1)
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--durable", action="store_true")
    args = parser.parse_args()

    spark = childsession.local_session()
    reader = (
        spark.readStream.format("hutch")
        .option("uri", args.uri)
        .option("queue", args.queue)
        .option("maxMessagesPerBatch", "100")
    )
    if args.durable:
        reader = reader.option("durableBatches", "true").option(
            "batchLogDir", f"{args.checkpoint}/hutch-batches"
        )

    def record(frame: Any, batch_id: int) -> None:
        rows = [[row.message_id, row.seq] for row in frame.select("message_id", "seq").collect()]
        write_atomically(args.out / f"run{args.run}-batch-{batch_id}.json", rows)
        if batch_id == args.hang_at:
            (args.out / f"hang-{batch_id}").touch()
            time.sleep(600)

    query = (
        reader.load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    # Once every id is recorded, a few more triggers, so the last batch is acked too.
    def done() -> bool:
        return bool(args.expect) and len(seen_ids(args.out)) >= args.expect

    childsession.run_until(spark, query, done, settle_s=1.0)


if __name__ == "__main__":
    main()
