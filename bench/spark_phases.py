"""The Spark source benchmark's phases and summaries, shared by the host and the node runs.

Why a module of its own: bench/spark_bench.py runs these phases with the driver on this host
(local mode), and bench/spark_node_job.py runs the very same functions inside a driver Pod on
the real node (bench/spark_node_bench.py submits it). The Pod has pika, pyspark and hutch_spark
(the hutch-spark image) but not hutch_testing, so nothing here imports it; rounds.py (pure) is
the only other bench module it needs, and both are copied beside the job.

Phases (one broker URL; each on a queue of its own):
1. plain: prefill N messages, then a pika BlockingConnection consumer (prefetch 10000, manual
   ack multiple=true every 1000) drains them; rate = N / time.
2. source: prefill N, then a streaming query (`format("hutch")`, maxMessagesPerBatch 20000,
   prefetch 40000, 2 partitions (--partitions), trigger as fast as possible, noop sink) drains
   them; the sustained rate excludes the first micro-batch (query start-up) and is computed from
   Spark's progress reports.
3. latency: a publisher process sends `rate` msgs/s, each body carrying its publish time; a
   query with a 200 ms processing-time trigger (default batch settings) records, in
   foreachBatch, now - publish time. The publisher is a separate process so that it does not
   compete with the driver for the GIL.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pika
import rounds

BODY = b"x" * 200


def add_arguments(parser: argparse.ArgumentParser, *, output_required: bool = False) -> None:
    """The phases' flags, shared by spark_bench.py, spark_node_bench.py and the job it submits
    (spark_node_job.py), so the three agree on names and defaults."""
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--latency-rate", type=int, default=500)
    parser.add_argument("--warm-up", type=int, default=None,
                        help="messages in the discarded warm-up (default: --messages)")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=2,
                        help="the throughput query's numPartitions")  # fmt: skip
    parser.add_argument("--output", type=Path, required=output_required)


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


def source_rate(
    spark: Any, url: str, count: int, work: Path, partitions: int = 2
) -> dict[str, Any]:
    queue = f"bench-source-{time.monotonic_ns()}"
    prefill(url, queue, count)
    frame = (
        spark.readStream.format("hutch")
        .option("uri", url)
        .option("queue", queue)
        .option("maxMessagesPerBatch", "20000")
        .option("prefetch", "40000")
        .option("numPartitions", str(partitions))
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
        "phases_ms": phase_medians(progress[1:]),
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
    busy = [p for p in query.recentProgress if p["numInputRows"] > 0]
    samples.sort()
    return {
        "phases_ms": phase_medians(busy),
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


def phase_medians(progress: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each of Spark's per-batch phases (durationMs: latestOffset, queryPlanning,
    addBatch, walCommit, commitOffsets, triggerExecution...): where a batch spends its time."""
    keys = {key for p in progress for key in p["durationMs"]}
    return {key: statistics.median(p["durationMs"].get(key, 0) for p in progress)
            for key in sorted(keys)}  # fmt: skip


def _parse(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def measure_phases(
    spark: Any,
    url: str,
    count: int,
    work: Path,
    *,
    latency_seconds: float | None,
    latency_rate: int = 500,
    partitions: int = 2,
) -> dict[str, Any]:
    """Plain consumer, source, and (unless latency_seconds is None: a warm-up) latency."""
    sample: dict[str, Any] = {"load": rounds.load()}
    sample["plain_rate"] = plain_consumer_rate(url, count)
    sample["source"] = source_rate(spark, url, count, work, partitions)
    if latency_seconds is not None:
        sample["latency"] = latency(spark, url, latency_seconds, latency_rate, work)
    return sample


def warm_up_size(args: argparse.Namespace) -> int:
    """A whole round's worth by default: a one-batch warm-up left the source's path cold (with
    10000 messages the node run's source rose round after round, 21.8k to 46.1k msg/s)."""
    return int(args.warm_up) if args.warm_up is not None else int(args.messages)


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
