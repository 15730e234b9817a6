"""Benchmark the `hutch` Spark source: sustained msgs/s and publish-to-batch latency.

Why: the source's design puts every message through one driver-side consumer (shared/design/
spark.md §2), so its rate is bounded by that process. This script measures it next to a plain
pika consumer on the same broker in the same run, and measures latency under a 200 ms trigger.
Targets (issue 6): the source sustains at least half the plain consumer's rate, and its p50
publish-to-batch latency is at most 250 ms. A benchmark, not a timed test: nothing here runs in CI.

    python bench/spark_bench.py [--brokers hutch,rabbitmq] [--messages 50000] [--repeat 3]
                                [--latency-seconds 20]

Method (bench/rounds.py): one Spark session for the whole run. First a discarded warm-up on every
broker (plain and source phases with a fifth of the messages), so the JVM's JIT, Spark's planner
and the Python workers are warm before anything counts; without it the first broker measured pays
for them inside its "sustained" figure, which made earlier single runs depend on the order. Then
``--repeat`` rounds, the broker order alternating (AB, BA, AB); each round starts a fresh broker,
runs the three phases and stops it. Reported: medians with their range, the source/plain ratio and
the Hutch/RabbitMQ ratios as medians of per-round ratios, and the machine's load at each sample.

Phases, per broker and round (each broker a private child process on loopback):
1. plain: prefill N messages, then a pika BlockingConnection consumer (prefetch 10000, manual
   ack multiple=true every 1000) drains them; rate = N / time.
2. source: prefill N, then a streaming query (`format("hutch")`, maxMessagesPerBatch 20000,
   prefetch 40000, 2 partitions, trigger as fast as possible, noop sink) drains them; the
   sustained rate excludes the first micro-batch (query start-up) and is computed from Spark's
   progress reports. Each micro-batch costs Spark ~200-500 ms of fixed work (offset and commit
   logs, planning) on this machine, so throughput needs large batches (docs/spark.md).
3. latency: a publisher process sends `--latency-rate` msgs/s, each body carrying its publish
   time; a query with a 200 ms processing-time trigger (default batch settings) records, in
   foreachBatch, now - publish time. The publisher is a separate process so that it does not
   compete with the driver for the GIL.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import hutch_spark
import pika
import rounds
from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[1]
try:
    from hutch_testing import brokers, rabbitmq
except ImportError:  # a plain checkout: the testing package is not installed
    sys.path.insert(0, str(REPO / "testing"))
    from hutch_testing import brokers, rabbitmq

BODY = b"x" * 200


def prefill(url: str, queue: str, count: int) -> None:
    """Publishes `count` messages (confirms every 1000) and waits until all are ready."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(queue, durable=False)
    properties = pika.BasicProperties(message_id=None)
    for start in range(0, count, 1000):
        for _ in range(min(1000, count - start)):
            channel.basic_publish("", queue, BODY, properties)
        connection.process_data_events(0)
    deadline = time.monotonic() + 120
    while channel.queue_declare(queue, passive=True).method.message_count < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"prefill of {queue} never reached {count}")
        time.sleep(0.1)
    connection.close()


def plain_consumer_rate(url: str, count: int) -> float:
    queue = f"bench-plain-{time.monotonic_ns()}"
    prefill(url, queue, count)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=10_000)
    received = 0
    began = time.perf_counter()

    def on_message(ch: Any, method: Any, _properties: Any, _body: bytes) -> None:
        nonlocal received
        received += 1
        if received % 1000 == 0 or received == count:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if received == count:
            ch.stop_consuming()

    channel.basic_consume(queue, on_message)
    channel.start_consuming()
    elapsed = time.perf_counter() - began
    channel.queue_delete(queue)
    connection.close()
    return count / elapsed


def source_rate(spark: Any, url: str, count: int, work: Path) -> dict[str, Any]:
    queue = f"bench-source-{time.monotonic_ns()}"
    prefill(url, queue, count)
    frame = (
        spark.readStream.format("hutch")
        .option("uri", url)
        .option("queue", queue)
        .option("maxMessagesPerBatch", "20000")
        .option("prefetch", "40000")
        .option("numPartitions", "2")
        .load()
    )
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(work / f"ckpt-{queue}"))
        .start()
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        if sum(p["numInputRows"] for p in progress) >= count:
            break
        if query.exception() is not None:
            raise RuntimeError(query.exception())
        time.sleep(0.5)
    query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    steady = progress[1:]
    start = _parse(steady[0]["timestamp"])
    last = steady[-1]
    end = _parse(last["timestamp"]) + last["batchDuration"] / 1000
    rows = sum(p["numInputRows"] for p in steady)
    return {
        "rate": rows / (end - start),
        "batches": len(progress),
        "rows_per_batch_max": max(p["numInputRows"] for p in progress),
        "first_batch_ms": progress[0]["batchDuration"],
    }


def latency(spark: Any, url: str, seconds: float, rate: int, work: Path) -> dict[str, Any]:
    queue = f"bench-latency-{time.monotonic_ns()}"
    setup = pika.BlockingConnection(pika.URLParameters(url))
    setup.channel().queue_declare(queue, durable=False)
    setup.close()
    samples: list[float] = []
    collecting = threading.Event()

    def record(batch: Any, _batch_id: int) -> None:
        now = time.time()
        bodies = [row.body for row in batch.select("body").collect()]
        if collecting.is_set():
            samples.extend(now - float(body) for body in bodies)

    query = (
        spark.readStream.format("hutch")
        .option("uri", url)
        .option("queue", queue)
        .load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(work / f"ckpt-{queue}"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    time.sleep(8)  # the first batches pay for worker start-up; they are not measured
    collecting.set()
    context = multiprocessing.get_context("spawn")  # never fork a process that drives a JVM
    sent = context.Value("i", 0)
    publisher = context.Process(target=publish_steadily, args=(url, queue, seconds, rate, sent))
    publisher.start()
    publisher.join(seconds + 60)
    time.sleep(2.0)  # the last messages reach a batch
    query.stop()
    durations = [p["durationMs"] for p in query.recentProgress if p["numInputRows"] > 0]
    if os.environ.get("HUTCH_BENCH_DEBUG"):
        for d in durations[-8:]:
            print({k: v for k, v in d.items() if v > 2})
    samples.sort()
    return {
        "sent": sent.value,
        "received": len(samples),
        "p50_ms": 1000 * statistics.median(samples),
        "p95_ms": 1000 * samples[int(0.95 * (len(samples) - 1))],
        "max_ms": 1000 * samples[-1],
    }


def publish_steadily(url: str, queue: str, seconds: float, rate: int, sent: Any) -> None:
    """Publishes `rate` msgs/s for `seconds`; each body is its publish time (epoch seconds)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    interval = 1.0 / rate
    began = time.monotonic()
    count = 0
    while time.monotonic() - began < seconds:
        delay = began + count * interval - time.monotonic()
        if delay > 0:
            connection.sleep(delay)
        channel.basic_publish("", queue, repr(time.time()).encode())
        count += 1
    sent.value = count
    connection.close()


def _parse(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def start_broker(kind: str, work: Path) -> Any:
    if kind == "hutch":
        return brokers.HutchBroker(work_dir=work / f"hutch-{time.monotonic_ns()}").start()
    return rabbitmq.RabbitMQ().start()


def measure(
    spark: Any, kind: str, args: argparse.Namespace, work: Path, count: int
) -> dict[str, Any]:
    """One round on one fresh broker: plain consumer, source, and (unless count is a warm-up)
    latency."""
    sample: dict[str, Any] = {"broker": kind, "load": rounds.load()}
    broker = start_broker(kind, work)
    try:
        sample["plain_rate"] = plain_consumer_rate(broker.amqp_url, count)
        sample["source"] = source_rate(spark, broker.amqp_url, count, work)
        if count == args.messages:
            sample["latency"] = latency(
                spark, broker.amqp_url, args.latency_seconds, args.latency_rate, work
            )
    finally:
        broker.stop()
    return sample


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per broker: medians and ranges, source/plain paired by round."""
    plain = [s["plain_rate"] for s in samples]
    source = [s["source"]["rate"] for s in samples]
    p50 = [s["latency"]["p50_ms"] for s in samples]
    p95 = [s["latency"]["p95_ms"] for s in samples]
    return {
        "plain_rate": rounds.summarize(plain).as_dict(),
        "source_rate": rounds.summarize(source).as_dict(),
        "source_over_plain": rounds.ratios(source, plain).as_dict(),
        "latency_p50_ms": rounds.summarize(p50).as_dict(),
        "latency_p95_ms": rounds.summarize(p95).as_dict(),
        "first_batch_ms": rounds.summarize(
            [s["source"]["first_batch_ms"] for s in samples]
        ).as_dict(),
    }


def report_lines(kind: str, stats: dict[str, Any]) -> list[str]:
    def spread(key: str, unit: str = "") -> str:
        return rounds.Spread(**{k: stats[key][k] for k in ("n", "median", "low", "high")}).text(
            unit
        )

    ratio = stats["source_over_plain"]
    return [
        f"[{kind}] plain pika consumer: {spread('plain_rate', ' msg/s')}",
        f"[{kind}] hutch source (sustained): {spread('source_rate', ' msg/s')}; source/plain "
        f"{ratio['median']:.2f} ({ratio['low']:.2f}-{ratio['high']:.2f}); first batch "
        f"{spread('first_batch_ms', ' ms')}",
        f"[{kind}] latency publish->foreachBatch @ 200 ms trigger: p50 "
        f"{spread('latency_p50_ms', ' ms')}, p95 {spread('latency_p95_ms', ' ms')}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="hutch")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--latency-rate", type=int, default=500)
    parser.add_argument("--output", type=Path)
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
        "cpus": os.cpu_count(),
    }
    samples: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="hutch-spark-bench-") as scratch:
        work = Path(scratch)
        warm = max(1000, args.messages // 5)
        for kind in kinds:
            print(f"warm-up on {kind} ({warm} messages, discarded)", flush=True)
            measure(spark, kind, args, work, warm)
        for index, order in enumerate(rounds.orders(kinds, args.repeat)):
            for kind in order:
                print(f"round {index + 1}/{args.repeat}: {kind}", flush=True)
                sample = measure(spark, kind, args, work, args.messages)
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
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    output = args.output or REPO / "bench" / "results" / f"spark-{stamp}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2))
    print(f"results: {output}")


if __name__ == "__main__":
    main()
