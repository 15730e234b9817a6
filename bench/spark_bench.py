"""Benchmark the `hutch` Spark source: sustained msgs/s and publish-to-batch latency.

Why: the source's design puts every message through one driver-side consumer
(docs/contracts/spark.md#ack-protocol), so its rate is bounded by that process. This script measures
it next to a plain pika consumer on the same broker in the same run, and measures latency under a
200 ms trigger. Targets (issue 13), in one run: on hutch-broker the source sustains at least 0.9x
the plain consumer's rate and at least 1.0x the same source on RabbitMQ 3.10.8, and its p50
publish-to-batch latency is at most 250 ms. A benchmark, not a timed test: nothing here runs in CI.

    python bench/spark_bench.py [--brokers hutch,rabbitmq] [--messages 50000] [--repeat 3]
                                [--latency-seconds 20]

Both brokers by default (``--brokers hutch`` measures one alone, without the ratio).

Method (bench/rounds.py): one Spark session for the whole run. First a discarded warm-up on every
broker (plain and source phases with a whole round's messages, `--warm-up`), so the JVM's JIT,
Spark's planner and the Python workers are warm before anything counts; without it the first
broker measured pays for them inside its "sustained" figure, which made earlier single runs
depend on the order. Then ``--repeat`` rounds, the broker order alternating (AB, BA, AB); each
round starts a fresh broker, runs the three phases and stops it. Reported: medians with their
range, the source/plain ratio and the Hutch/RabbitMQ ratios as medians of per-round ratios, and
the machine's load at each sample.

Phases, per broker and round (each broker a private child process on loopback): plain pika
consumer, source, latency, as bench/spark_phases.py describes. bench/spark_node_bench.py runs the
same phases with the driver in a Pod on the real node.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import hutch_spark
import rounds
from hutch_spark import checkpoints
from pyspark.sql import SparkSession
from spark_phases import (
    BODY,
    add_arguments,
    measure_phases,
    report_lines,
    summary,
    warm_up_size,
)

REPO = Path(__file__).resolve().parents[1]
try:
    from hutch_testing import brokers, rabbitmq
except ImportError:  # a plain checkout: the testing package is not installed
    sys.path.insert(0, str(REPO / "testing"))
    from hutch_testing import brokers, rabbitmq


def start_broker(kind: str, work: Path) -> Any:
    if kind == "hutch":
        return brokers.HutchBroker(work_dir=work / f"hutch-{time.monotonic_ns()}").start()
    return rabbitmq.RabbitMQ().start()


def measure(
    spark: Any, kind: str, args: argparse.Namespace, work: Path, count: int, *, warm_up: bool
) -> dict[str, Any]:
    """One round on one fresh broker: plain consumer, source, and (unless a warm-up) latency."""
    broker = start_broker(kind, work)
    try:
        sample = measure_phases(
            spark,
            broker.amqp_url,
            count,
            work,
            latency_seconds=None if warm_up else args.latency_seconds,
            latency_rate=args.latency_rate,
            partitions=args.partitions,
        )
    finally:
        broker.stop()
    sample["broker"] = kind
    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="hutch,rabbitmq")
    add_arguments(parser)
    args = parser.parse_args()
    kinds = args.brokers.split(",")

    # Spark's Python workers run PYSPARK_PYTHON; it must be this interpreter (with pyarrow).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    hutch_spark.register(spark)
    results: dict[str, Any] = {
        "messages": args.messages,
        "body_bytes": len(BODY),
        "repeat": args.repeat,
        "partitions": args.partitions,
        "cpus": os.cpu_count(),
    }
    samples: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="hutch-spark-bench-") as scratch:
        work = Path(scratch)
        checkpoints.configure(spark, scratch)  # as windowed_counts does (hutch_spark.checkpoints)
        warm = warm_up_size(args)
        for kind in kinds:
            print(f"warm-up on {kind} ({warm} messages, discarded)", flush=True)
            measure(spark, kind, args, work, warm, warm_up=True)
        for index, order in enumerate(rounds.orders(kinds, args.repeat)):
            for kind in order:
                print(f"round {index + 1}/{args.repeat}: {kind}", flush=True)
                sample = measure(spark, kind, args, work, args.messages, warm_up=False)
                sample["round"] = index
                samples[kind].append(sample)
    spark.stop()
    for kind in kinds:
        stats = summary(samples[kind])
        # The flat keys bench/comparison.py has always read are the medians.
        results[kind] = {
            "plain_rate": stats["plain_rate"]["median"],
            "source": {
                "rate": stats["source_rate"]["median"],
                "first_batch_ms": stats["first_batch_ms"]["median"],
            },
            "latency": {
                "p50_ms": stats["latency_p50_ms"]["median"],
                "p95_ms": stats["latency_p95_ms"]["median"],
            },
            "summary": stats,
            "samples": samples[kind],
        }
        print("\n".join(report_lines(kind, stats)))
    if {"hutch", "rabbitmq"} <= set(kinds):
        cross = rounds.ratios(
            [s["source"]["rate"] for s in samples["hutch"]],
            [s["source"]["rate"] for s in samples["rabbitmq"]],
        )
        results["hutch_over_rabbitmq_source"] = cross.as_dict()
        print(
            f"source on hutch / source on rabbitmq, per round: {cross.median:.2f} "
            f"({cross.low:.2f}-{cross.high:.2f}, n={cross.n})"
        )
    every = [sample for kind in kinds for sample in samples[kind]]
    results["machine_load"] = rounds.busiest(every)
    print(results["machine_load"])
    rounds.write_results(results, args.output, "spark")


if __name__ == "__main__":
    main()
