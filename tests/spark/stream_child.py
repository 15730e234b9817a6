"""A streaming driver for the stream-queue kill test, run as its own process (never collected).

It reads stream queues with the `hutch` source (option `streams`) and writes them with Spark's
file sink (Parquet) and a checkpoint, `maxOffsetsPerTrigger` rows a batch. With
`--hang-stream S --hang-offset N` an executor task that meets offset N of stream S writes
`<out>/hang` and blocks: that batch is in Spark's offsets log but not committed when the parent
kills the whole process group; until then it runs as long as its parent does (no run has a
deadline of its own, see childsession). Its trigger is a processing time, what a long-running
job uses, so this is what is killed and resumed; the runs after the kill are queries in the
test's own session (reruns.py).

With `--sink batches` the output is `foreachBatch` instead, the idempotent write a user of it
makes: each batch's rows go to `<output>/batch-<id>.json` (written whole, then renamed), so a
replayed batch replaces its own file and the parent sees exactly what every batch read. With
`--block-batch N` that function writes `<out>/blocked` and blocks when batch N comes, before
writing: batch N is in the offsets log, not committed, even when it has no rows (the first
batch of a query from `latest` has none), which a task's hang cannot reach.
"""

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import childsession


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--management", required=True)
    parser.add_argument("--streams", required=True)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-offsets", default="100")
    parser.add_argument("--hang-stream", default="")
    parser.add_argument("--hang-offset", type=int, default=-1)
    parser.add_argument("--starting", default="earliest")  # "" for the source's default
    parser.add_argument("--sink", choices=("parquet", "batches"), default="parquet")
    parser.add_argument("--block-batch", type=int, default=-1)
    args = parser.parse_args()

    spark = childsession.local_session()
    from pyspark.sql import functions as F  # noqa: N812 - Spark's idiom
    from pyspark.sql.types import LongType

    hang_flag = str(args.out / "hang")

    def maybe_hang(stream: str, offset: int) -> int:
        if stream == args.hang_stream and offset == args.hang_offset:
            Path(hang_flag).touch()
            time.sleep(600)
        return offset

    def write_batch(frame: Any, batch: int) -> None:
        if batch == args.block_batch:
            (args.out / "blocked").touch()
            time.sleep(600)
        rows = [
            [row.stream, row.offset, bytes(row.body).decode()]
            for row in frame.select("stream", "offset", "body").collect()
        ]
        target = Path(args.output) / f"batch-{batch}.json"
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps(rows))
        os.replace(temporary, target)

    reader = (
        spark.readStream.format("hutch")
        .option("uri", args.uri)
        .option("managementUri", args.management)
        .option("streams", args.streams)
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .option("numPartitions", "2")
    )
    if args.starting:
        reader = reader.option("startingOffsets", args.starting)
    rows = reader.load()
    if args.hang_stream:
        rows = rows.withColumn("offset", F.udf(maybe_hang, LongType())("stream", "offset"))
    frame: Any = rows.select("stream", "offset", "message_id", "body")
    if args.sink == "batches":
        Path(args.output).mkdir(parents=True, exist_ok=True)
        writer = frame.writeStream.foreachBatch(write_batch)
    else:
        writer = frame.writeStream.format("parquet").option("path", args.output)
    query = (
        writer.option("checkpointLocation", str(args.checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    # A run is never done: it ends when killed (it hangs or blocks first), when its query fails
    # or when its parent is gone (childsession.run_until).
    childsession.run_until(spark, query, lambda: False)


if __name__ == "__main__":
    main()
