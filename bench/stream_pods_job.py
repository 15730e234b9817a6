"""The stream scaling benchmark's driver program, run in a driver Pod on the real node.

Why: bench/stream_pods_bench.py asks how a stream query's read rate grows with its executor
Pods. This program is what it submits, once per run: it waits until all its executors have
registered (so a run with 2 never reads with 1 while the second starts), warms each executor's
Python worker and connection with a batch read of the streams' first offsets, then reads every
stream from its first offset with ``trigger(availableNow=True)`` into Spark's ``noop`` sink
(every row and body is produced on the executors; nothing is written and nothing comes back
to the driver). It records the query's progress (each batch's start and duration, its rows)
and the driver container's own CPU (cgroup v1 ``cpuacct.usage``) around the query and then
over a few idle seconds (what the driver's JVM and Python use with no query: heartbeats,
the Pod watcher, GC), as JSON on the job's volume. The host adds the executors' and the
broker's CPU from their cgroups.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path
from typing import Any

import hutch_spark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812

CPUACCT = Path("/sys/fs/cgroup/cpuacct/cpuacct.usage")  # the container's own, under runc
REGISTER_TIMEOUT_S = 300
IDLE_S = 5.0  # the driver's CPU with no query running, to tell its background from the read


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", required=True, help="a comma list of stream queues")
    parser.add_argument("--messages", type=int, required=True, help="all streams together")
    parser.add_argument("--executors", type=int, required=True, help="to wait for")
    parser.add_argument("--partitions", type=int, default=2, help="slices per stream per batch")
    parser.add_argument("--max-per-trigger", type=int, default=50_000)
    parser.add_argument("--warm-up", type=int, default=2_000, help="offsets per stream")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--output", required=True, help="results JSON")
    parser.add_argument("--uri", help="default: HUTCH_AMQP_URI (a local dry run sets these)")
    parser.add_argument("--management-uri", help="default: http://<uri's host>:15672")
    return parser.parse_args(argv)


def cpu_ns() -> int | None:
    """This container's CPU time so far, or None where the cgroup is not visible."""
    try:
        return int(CPUACCT.read_text())
    except (OSError, ValueError):
        return None


def epoch(timestamp: str) -> float:
    """A query progress timestamp (``2026-11-28T17:01:02.345Z``) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def wait_for_executors(spark: SparkSession, wanted: int) -> float:
    """Seconds until ``wanted`` executors are registered (the driver counts as one entry)."""
    began = time.monotonic()
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    while status.size() - 1 < wanted:
        if time.monotonic() - began > REGISTER_TIMEOUT_S:
            raise RuntimeError(f"{status.size() - 1} of {wanted} executors registered")
        time.sleep(0.2)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    return time.monotonic() - began


def hutch_options(args: argparse.Namespace, streams: list[str]) -> dict[str, str]:
    """The source's options both reads share."""
    options = {"streams": ",".join(streams), "numPartitions": str(args.partitions)}
    if args.uri:
        options["uri"] = args.uri
    if args.management_uri:
        options["managementUri"] = args.management_uri
    return options


def warm_up(spark: SparkSession, args: argparse.Namespace, streams: list[str]) -> int:
    """A batch read of each stream's first ``--warm-up`` offsets, as many tasks as the timed
    read has per batch, so every executor starts its Python worker before the clock runs."""
    ending = json.dumps(dict.fromkeys(streams, args.warm_up))
    rows = (
        spark.read.format("hutch")
        .options(**hutch_options(args, streams))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", ending)
        .load()
        .agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes"))
        .collect()
    )
    return int(rows[0]["n"])


def timed_read(spark: SparkSession, args: argparse.Namespace, streams: list[str]) -> dict[str, Any]:
    """The measured query: all of every stream, availableNow, noop sink."""
    reader = (
        spark.readStream.format("hutch")
        .options(**hutch_options(args, streams))
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_per_trigger))
    )
    rows = reader.load().select("stream", "offset", F.length("body").alias("size"))
    cpu_before, began = cpu_ns(), time.time()
    query = (
        rows.writeStream.format("noop")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    ended, cpu_after = time.time(), cpu_ns()
    batches = [
        {
            "batch": p["batchId"],
            "start": epoch(p["timestamp"]),
            "seconds": p["durationMs"].get("triggerExecution", 0) / 1000,
            "rows": p["numInputRows"],
            "durations_ms": p["durationMs"],
        }
        for p in (json.loads(item.json) for item in query.recentProgress)
        if p["numInputRows"] > 0
    ]
    return {
        "query_started": began,
        "query_ended": ended,
        "batches": batches,
        "driver_cpu_seconds": (
            (cpu_after - cpu_before) / 1e9 if cpu_before is not None and cpu_after else None
        ),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    streams = args.streams.split(",")
    spark = SparkSession.builder.appName("stream-pods-bench").getOrCreate()
    hutch_spark.register(spark)
    registered = wait_for_executors(spark, args.executors)
    began = time.monotonic()
    warmed = warm_up(spark, args, streams)
    warm_seconds = time.monotonic() - began
    found = timed_read(spark, args, streams)
    rows = sum(b["rows"] for b in found["batches"])
    if rows != args.messages:
        raise RuntimeError(f"the query read {rows} rows, not {args.messages}")
    idle_cpu, idle_began = cpu_ns(), time.time()
    time.sleep(IDLE_S)
    idle_ended, idle_after = time.time(), cpu_ns()
    found |= {
        "idle_started": idle_began,
        "idle_ended": idle_ended,
        "driver_idle_cpu_seconds": (
            (idle_after - idle_cpu) / 1e9 if idle_cpu is not None and idle_after else None
        ),
        "executors": args.executors,
        "registered_seconds": round(registered, 2),
        "warm_up": {"rows": warmed, "seconds": round(warm_seconds, 2)},
        "rows": rows,
    }
    Path(args.output).write_text(json.dumps(found, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
