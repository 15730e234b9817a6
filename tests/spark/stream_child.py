"""A streaming driver for the stream-queue kill tests, run as its own process (never collected).

Each query (a group of arguments after ``--query``, or one query's arguments after
``--uri`` and ``--management`` alone) reads stream queues with the `hutch`
source (option `streams`) and writes them with Spark's file sink (Parquet) and a checkpoint,
`maxOffsetsPerTrigger` rows a batch. With `--hang-stream S --hang-offset N` an executor task
that meets offset N of stream S writes `<out>/hang` and blocks: that batch is in Spark's offsets
log but not committed when the parent kills the whole process group; until then it runs as
long as its parent does (no run has a deadline of its own, see childsession). Its trigger is a
processing time, what a long-running job uses, so this is what is killed and resumed; the runs
after the kill are queries in the test's own session (reruns.py).

With `--sink batches` the output is `foreachBatch` instead, the idempotent write a user of it
makes: each batch's rows go to `<output>/batch-<id>.json` (written whole, then renamed), so a
replayed batch replaces its own file and the parent sees exactly what every batch read. With
`--block-batch N` that function writes `<out>/blocked` and blocks when batch N comes, before
writing: batch N is in the offsets log, not committed, even when it has no rows (the first
batch of a query from `latest` has none), which a task's hang cannot reach.

Why several queries in one driver: a driver's start (a JVM and its Python workers) was most of
a kill case's run 1, and a kill proves each query's case alike, so a test with several cases
starts one driver and kills it once every query is where its case needs it. Each query has its
own checkpoint, output and `--out`, and a foreachBatch or a task that blocks holds only its own
query (a query's foreachBatch runs on a thread of its own).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import childsession


def query_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stream_child.py ... --query")
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
    return parser


def split_queries(argv: list[str]) -> tuple[list[str], list[list[str]]]:
    """The common arguments and each ``--query`` group's own, in order."""
    groups: list[list[str]] = [[]]
    for argument in argv:
        if argument == "--query":
            groups.append([])
        else:
            groups[-1].append(argument)
    return groups[0], groups[1:]


def start_query(spark: Any, uri: str, management: str, args: argparse.Namespace) -> Any:
    """Starts one query as its arguments say."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's idiom
    from pyspark.sql.types import LongType

    hang_flag = str(args.out / "hang")
    hang_stream, hang_offset = args.hang_stream, args.hang_offset

    def maybe_hang(stream: str, offset: int) -> int:
        if stream == hang_stream and offset == hang_offset:
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
        .option("uri", uri)
        .option("managementUri", management)
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
    return (
        writer.option("checkpointLocation", str(args.checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def main() -> None:
    common, groups = split_queries(sys.argv[1:])
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--management", required=True)
    args, rest = parser.parse_known_args(common)
    if not groups:  # one query's arguments may follow the common ones without --query
        groups = [rest]
    elif rest:
        parser.error(f"unrecognized arguments before the first --query: {' '.join(rest)}")
    queries = [query_parser().parse_args(group) for group in groups]

    spark = childsession.local_session()
    running = childsession.Queries(
        [start_query(spark, args.uri, args.management, query) for query in queries]
    )
    # A run is never done: it ends when killed (its queries hang or block first), when a query
    # fails or when its parent is gone (childsession.run_until).
    childsession.run_until(spark, running, lambda: False)


if __name__ == "__main__":
    main()
