"""A streaming driver for the SIGKILL test, run as its own process (never collected by pytest).

It consumes a queue with the `hutch` source and writes each micro-batch's rows to
`<out>/run<r>-batch-<id>.json` (write, fsync, rename), so the parent can see exactly what every
run processed. With `--hang-at N` it writes `hang-<N>` after recording batch N and then blocks
inside foreachBatch: batch N is in Spark's offsets log but never in its commit log when the
parent kills the whole process group. Without it, the run stops once every id in `--expect`
has been recorded by some run.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


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

    import hutch_spark
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    hutch_spark.register(spark)
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
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and query.exception() is None:
        if args.expect and len(seen_ids(args.out)) >= args.expect:
            time.sleep(1.0)  # a few more triggers, so the last batch is acked too
            break
        time.sleep(0.2)
    failure = query.exception()
    query.stop()
    spark.stop()
    sys.exit(1 if failure is not None else 0)


if __name__ == "__main__":
    main()
