"""Benchmark the Hutch stream source against Spark's Kafka source on a local Apache Kafka.

Why: issue 28 asks whether the stream source (option `streams`, docs/spark.md "Read stream
queues") at least matches what users would pick instead, Spark's own Kafka source reading a Kafka
broker on the same machine, in throughput and p50 latency. Both read the same number of messages
of the same size, split the same way (one stream read in `--partitions` slices; a topic with
`--partitions` partitions), in one Spark session in local mode (local[2]), in interleaved rounds
(bench/rounds.py). A benchmark, not a timed test: nothing here runs in CI.

    python bench/stream_bench.py [--messages 200000] [--body-size 200] [--partitions 2]
                                 [--repeat 3] [--modes plain,batch,available-now]
                                 [--latency-seconds 15]
                                 [--scaling]

Per system and round, on a fresh broker (hutch-broker as bench/run.py starts it; Kafka from
bench/kafka.py, KRaft, one node): load the messages, then
- plain: each source's client without Spark (Hutch: the source's executor reader,
  streamreads.read_slice, on the whole stream in this process; Kafka: ConsumerPerformance), the
  ceiling each source's client sets;
- batch: `spark.read` from earliest to latest, `count(*)` and `sum(length(body))` (so every
  row and every body is read, and the counts are checked); rate = messages / wall time;
- available-now: `readStream` with `trigger(availableNow=True)`, `maxOffsetsPerTrigger`
  `--max-per-trigger` for both, noop sink; rate = messages / wall time from start to end, and
  the rows Spark reports must be all of them; the sample also keeps where the time went
  (`progress_breakdown`: start to first trigger, `durationMs` summed by part, rows and time per
  batch), which docs/bench/profile.md reads;
- latency: a query from `latest` with a 200 ms processing-time trigger; a publisher sends
  `--latency-rate` msg/s for `--latency-seconds`; each row's latency is the time its batch's
  foreachBatch ran minus its publish time (Hutch: the body, written by a pika publisher in
  another process, as bench/spark_phases.py does; Kafka: the record's CreateTime, set by Kafka's
  ProducerPerformance when it sends);
- the broker's CPU seconds (user + system, /proc) during each read, per million messages.
Before the timed reads each round primes Spark's Python workers with an untimed read of the
first `PRIME_OFFSETS` offsets of each partition (`prime_seconds` in the sample; `--no-prime`
skips it). Why: Spark kills a Python worker that has been idle for a minute (a constant in
PythonWorkerFactory), and the next Python task forks a new one and imports the source again.
Kafka's round with its latency phase lasts longer than that, so without priming the Hutch read
after it, and only that one, paid for new workers (+0.7-1.0 s on the Xeon, about 2 s on the
EPYC) and the batch ratio depended on the order of the round. `prime_seconds` keeps that cost
visible: it is the first Spark read of each round.
`--scaling` adds, in Hutch's rounds, the batch read with numPartitions 1 beside `--partitions`:
local mode's two task threads, not executor Pods (bench/spark_node_bench.py runs Pods).

The Kafka connector is the one Maven Central serves for this pyspark (bench/kafka.py,
`connector_version`); the results name both versions.
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import hutch_spark
import kafka
import pika
import pyspark
import rounds
from hutch_broker.store import records
from hutch_spark import checkpoints, sessionconf, streamoptions, streamreads
from hutch_spark.streamplan import Slice
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from spark_phases import publish_steadily
from stream_summary import flatten, report_lines, summarize

REPO = Path(__file__).resolve().parents[1]
SYSTEMS = ("hutch", "kafka")
MODES = ("plain", "batch", "available-now")
try:
    from hutch_testing import brokers
except ImportError:  # a plain checkout: the testing package is not installed
    sys.path.insert(0, str(REPO / "testing"))
    from hutch_testing import brokers


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _choices(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"{text!r}: choose a comma list of {', '.join(allowed)}"
            )
        return list(dict.fromkeys(names))

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--systems", type=_choices(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--modes", type=_choices(MODES), default=list(MODES))
    parser.add_argument("--messages", type=_positive, default=200_000)
    parser.add_argument("--body-size", type=_positive, default=200)
    parser.add_argument("--partitions", type=_positive, default=2,
                        help="numPartitions on one stream; the topic's partitions")  # fmt: skip
    parser.add_argument("--max-per-trigger", type=_positive, default=50_000,
                        help="maxOffsetsPerTrigger of the availableNow read")  # fmt: skip
    parser.add_argument("--repeat", type=_positive, default=3)
    parser.add_argument("--latency-seconds", type=float, default=15.0,
                        help="0 skips the latency phase")  # fmt: skip
    parser.add_argument("--latency-rate", type=_positive, default=500)
    parser.add_argument("--scaling", action="store_true",
                        help="also read Hutch with numPartitions 1 in each round")  # fmt: skip
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="skip the discarded warm-up read on each system")  # fmt: skip
    parser.add_argument("--no-prime", dest="prime", action="store_false",
                        help="skip each round's untimed priming read")  # fmt: skip
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.latency_seconds < 0:
        parser.error("--latency-seconds must be 0 (skip) or more")
    if args.scaling and args.partitions == 1:
        parser.error("--scaling compares --partitions with 1: give --partitions 2 or more")
    args.max_per_trigger = min(args.max_per_trigger, args.messages)
    return args


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[int(fraction * (len(ordered) - 1))]


# --- measuring (needs brokers, Java and Spark) ------------------------------------------------


def cpu_seconds(pids: Sequence[int]) -> float | None:
    """User plus system CPU time of these processes so far (/proc/<pid>/stat)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    try:
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None
    return total / ticks


class System:
    """One broker and how Spark reads it; `Hutch` and `Kafka` below."""

    name = ""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work

    def pids(self) -> list[int]:
        raise NotImplementedError

    def load(self, name: str, count: int) -> None:
        raise NotImplementedError

    def plain_rate(self, name: str, count: int) -> float:
        """The broker's own client reading the same messages without Spark: the ceiling."""
        raise NotImplementedError

    def reader(self, spark: Any, name: str, *, stream: bool, partitions: int) -> Any:
        raise NotImplementedError

    @staticmethod
    def prime_ends(stream: str, partitions: int, each: int) -> str:
        """The priming read's `endingOffsets` JSON: `each` offsets of every partition."""
        raise NotImplementedError

    def publish_timed(self, name: str, seconds: float, rate: int) -> Any:
        raise NotImplementedError

    def publish_times(self, batch: Any) -> list[float]:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class Hutch(System):
    name = "hutch"

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        super().__init__(args, work)
        self.broker = brokers.HutchBroker(work_dir=work / f"hutch-{time.monotonic_ns()}").start()

    def pids(self) -> list[int]:
        return list(self.broker.group_pids())

    def _next_offset(self, name: str) -> int:
        request = urllib.request.Request(f"{self.broker.http_url}/api/queues/%2F/{name}")  # noqa: S310
        user, password = self.broker.credentials
        manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        manager.add_password(None, self.broker.http_url, user, password)
        opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(manager))
        with opener.open(request, timeout=10) as reply:
            return int(json.load(reply).get("next_offset") or 0)

    def declare(self, name: str) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(self.broker.amqp_url))
        connection.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        connection.close()

    def load(self, name: str, count: int) -> None:
        self.declare(name)
        connection = pika.BlockingConnection(pika.URLParameters(self.broker.amqp_url))
        channel = connection.channel()
        body = b"x" * self.args.body_size
        properties = pika.BasicProperties(delivery_mode=2)
        for start in range(0, count, 1000):
            for _ in range(min(1000, count - start)):
                channel.basic_publish("", name, body, properties)
            connection.process_data_events(0)
        connection.close()
        deadline = time.monotonic() + 300
        while self._next_offset(name) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"stream {name} never reached {count} messages")
            time.sleep(0.2)

    def plain_rate(self, name: str, count: int) -> float:
        """The source's own executor reader on the whole stream, in this process, no Spark."""
        settings = streamoptions.parse_stream_options(
            {"streams": name, "uri": self.broker.amqp_url, "prefetch": "2000"}
        )
        began = time.perf_counter()
        batches = streamreads.read_slice(settings, Slice(name, 0, count))
        rows = sum(batch.num_rows for batch in batches)
        elapsed = time.perf_counter() - began
        if rows != count:
            raise RuntimeError(f"hutch: the reader read {rows} of {count} messages")
        return count / elapsed

    def reader(self, spark: Any, name: str, *, stream: bool, partitions: int) -> Any:
        base = spark.readStream if stream else spark.read
        frame = (
            base.format("hutch")
            .option("uri", self.broker.amqp_url)
            .option("managementUri", self.broker.http_url)
            .option("streams", name)
            .option("numPartitions", str(partitions))
            .option("prefetch", "2000")
        )
        return frame, "body"

    @staticmethod
    def prime_ends(stream: str, partitions: int, each: int) -> str:
        # One stream, which numPartitions slices: [0, partitions * each) gives each slice `each`.
        return json.dumps({stream: each * partitions})

    def publish_timed(self, name: str, seconds: float, rate: int) -> Any:
        context = multiprocessing.get_context("spawn")  # never fork a process driving a JVM
        sent = context.Value("i", 0)
        process = context.Process(
            target=publish_steadily, args=(self.broker.amqp_url, name, seconds, rate, sent)
        )
        process.start()
        process.join(seconds + 60)
        return sent.value

    def publish_times(self, batch: Any) -> list[float]:
        return [float(row.body) for row in batch.select("body").collect()]

    def stop(self) -> None:
        self.broker.stop()


class Kafka(System):
    name = "kafka"

    def __init__(self, args: argparse.Namespace, work: Path, lib: Path) -> None:
        super().__init__(args, work)
        self.broker = kafka.KafkaBroker(lib, work / f"kafka-{time.monotonic_ns()}").start()

    def pids(self) -> list[int]:
        return [self.broker.pid] if self.broker.pid else []

    def declare(self, name: str) -> None:
        self.broker.create_topic(name, self.args.partitions)

    def load(self, name: str, count: int) -> None:
        self.declare(name)
        self.broker.produce(name, count, self.args.body_size)

    def plain_rate(self, name: str, count: int) -> float:
        return self.broker.consume(name, count)

    def reader(self, spark: Any, name: str, *, stream: bool, partitions: int) -> Any:
        base = spark.readStream if stream else spark.read
        frame = (
            base.format("kafka")
            .option("kafka.bootstrap.servers", self.broker.bootstrap)
            .option("subscribe", name)
        )
        return frame, "value"

    @staticmethod
    def prime_ends(stream: str, partitions: int, each: int) -> str:
        return json.dumps({stream: {str(partition): each for partition in range(partitions)}})

    def publish_timed(self, name: str, seconds: float, rate: int) -> Any:
        count = int(seconds * rate)
        self.broker.produce(name, count, 32, rate)
        return count

    def publish_times(self, batch: Any) -> list[float]:
        return [
            row.t for row in batch.select(F.col("timestamp").cast("double").alias("t")).collect()
        ]

    def stop(self) -> None:
        self.broker.stop()


PRIME_OFFSETS = 1_000  # offsets of each partition the priming read takes


def prime_share(partitions: int, count: int) -> int:
    """The offsets of each partition the priming read takes: the first `PRIME_OFFSETS`, never
    more than a quarter of a partition's share of `count`, and never none."""
    return max(1, min(PRIME_OFFSETS, count // (4 * partitions)))


def prime(spark: Any, system: System, name: str) -> float:
    """The untimed read before a round's timed ones (module doc): its seconds."""
    args = system.args
    each = prime_share(args.partitions, args.messages)
    ends, rows = system.prime_ends(name, args.partitions, each), each * args.partitions
    began = time.perf_counter()
    frame, _ = system.reader(spark, name, stream=False, partitions=args.partitions)
    frame = frame.option("startingOffsets", "earliest").option("endingOffsets", ends).load()
    read = frame.count()
    if read != rows:
        raise RuntimeError(f"{system.name}: the priming read read {read} rows of {rows}")
    return time.perf_counter() - began


def batch_read(spark: Any, system: System, name: str, count: int, partitions: int) -> dict:
    before = cpu_seconds(system.pids())
    began = time.perf_counter()
    frame, body = system.reader(spark, name, stream=False, partitions=partitions)
    frame = frame.option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
    row = frame.agg(F.count("*").alias("n"), F.sum(F.length(body)).alias("bytes")).first()
    elapsed = time.perf_counter() - began
    after = cpu_seconds(system.pids())
    if row.n != count or row.bytes != count * system.args.body_size:
        raise RuntimeError(f"{system.name}: read {row.n} rows, {row.bytes} bytes of {count}")
    result = {"rate": count / elapsed, "seconds": elapsed}
    if before is not None and after is not None:
        result["broker_cpu_seconds"] = round(after - before, 3)
    return result


def available_now_read(spark: Any, system: System, name: str, count: int, work: Path) -> dict:
    before = cpu_seconds(system.pids())
    began = time.perf_counter()
    started = time.time()  # the progress reports' timestamps are wall-clock
    frame, _ = system.reader(spark, name, stream=True, partitions=system.args.partitions)
    query = (
        frame.option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(system.args.max_per_trigger))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(work / f"ckpt-{name}-{time.monotonic_ns()}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(600)
    elapsed = time.perf_counter() - began
    after = cpu_seconds(system.pids())
    if query.exception() is not None:
        raise RuntimeError(f"{system.name}: {query.exception()}")
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows != count:
        raise RuntimeError(f"{system.name}: the availableNow query read {rows} of {count}")
    result = {"rate": count / elapsed, "seconds": elapsed, "batches": len(query.recentProgress)}
    result.update(progress_breakdown(query.recentProgress, started))
    if before is not None and after is not None:
        result["broker_cpu_seconds"] = round(after - before, 3)
    return result


PROGRESS_PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
                  "triggerExecution")  # fmt: skip


def progress_breakdown(progress: Sequence[dict[str, Any]], started: float) -> dict[str, Any]:
    """Where an availableNow query's time went, from Spark's progress reports: the seconds from
    `start()` (epoch `started`) to its first trigger, which holds the start of a Python
    source's runner process (Kafka's source has none); each part of `durationMs` summed over
    the batches; and each batch's rows and trigger time. Compare parts within one run: on a
    shared machine the parts move together with the load."""
    if not progress:
        return {"first_trigger_s": None, "duration_ms": {}, "batch_rows": [], "trigger_ms": []}
    stamp = progress[0]["timestamp"].replace("Z", "+00:00")  # Spark writes UTC with a Z
    first_at = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
    return {
        "first_trigger_s": round(first_at - started, 3),
        "duration_ms": {
            part: sum(report["durationMs"].get(part, 0) for report in progress)
            for part in PROGRESS_PARTS
        },
        "batch_rows": [report["numInputRows"] for report in progress],
        "trigger_ms": [report["durationMs"].get("triggerExecution", 0) for report in progress],
    }


def latency(spark: Any, system: System, name: str, work: Path) -> dict[str, Any]:
    system.declare(name)
    samples: list[float] = []
    collecting = threading.Event()

    def record(batch: Any, _batch_id: int) -> None:
        now = time.time()
        times = system.publish_times(batch)
        if collecting.is_set():
            samples.extend(now - t for t in times)

    frame, _ = system.reader(spark, name, stream=True, partitions=1)
    query = (
        frame.option("startingOffsets", "latest")
        .load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(work / f"ckpt-{name}-{time.monotonic_ns()}"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    time.sleep(8)  # the first batches pay for worker start-up; they are not measured
    collecting.set()
    sent = system.publish_timed(name, system.args.latency_seconds, system.args.latency_rate)
    time.sleep(2.0)  # the last messages reach a batch
    query.stop()
    if not samples:
        raise RuntimeError(f"{system.name}: the latency query saw no messages")
    return {
        "sent": sent,
        "received": len(samples),
        "p50_ms": 1000 * statistics.median(samples),
        "p95_ms": 1000 * percentile(samples, 0.95),
        "max_ms": 1000 * max(samples),
    }


def measure(spark: Any, system: System, work: Path, *, warm_up: bool, index: int) -> dict:
    args = system.args
    sample: dict[str, Any] = {"load": rounds.load(), "messages": args.messages}
    name = f"bench-{index}-{time.monotonic_ns()}"
    loaded = time.perf_counter()
    system.load(name, args.messages)
    sample["load_seconds"] = time.perf_counter() - loaded
    if "plain" in args.modes and not warm_up:
        sample["plain_rate"] = system.plain_rate(name, args.messages)
    if args.prime and ("batch" in args.modes or "available-now" in args.modes):
        sample["prime_seconds"] = prime(spark, system, name)
    # With --scaling the two partition counts alternate which goes first, as the systems do.
    widths = [args.partitions]
    if args.scaling and system.name == "hutch":
        widths = [args.partitions, 1] if index % 2 else [1, args.partitions]
    if "batch" in args.modes:
        for width in widths:
            key = "batch" if width == args.partitions else "batch_1_partition"
            sample[key] = batch_read(spark, system, name, args.messages, width)
    if "available-now" in args.modes:
        sample["available_now"] = available_now_read(spark, system, name, args.messages, work)
    if args.latency_seconds > 0 and not warm_up:
        sample["latency"] = latency(spark, system, f"{name}-latency", work)
    return sample


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # hutch_spark with its bytecode, as the image installs it (pip's): where the environment sets
    # PYTHONDONTWRITEBYTECODE, an editable install has none, and every Python process Spark
    # starts (a query's runner, each worker) would compile the source's modules again.
    compileall.compile_dir(Path(hutch_spark.__file__).parent, quiet=1)
    connector = kafka.connector_version(pyspark.__version__)
    jars = kafka.fetch_connector(connector) if "kafka" in args.systems else []
    lib = kafka.fetch_broker() if "kafka" in args.systems else None
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.jars", ",".join(str(jar) for jar in jars))
        .config(sessionconf.PYTHON_SOCKETS, "true")  # as docs/spark.md has users start Spark
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    hutch_spark.register(spark)
    results: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "pyspark": pyspark.__version__,
        "spark_sql_kafka": connector if lib else None,
        "kafka": kafka.KAFKA_VERSION if lib else None,
        "cpus": os.cpu_count(),
        # which loop decodes the stream's records in the broker it starts (docs/broker.md
        # "Native code"): C, or its Python twin under HUTCH_BROKER_PURE_PYTHON
        "broker_decode_run": "C" if records.NATIVE_RUNS else "Python",
    }
    samples: dict[str, list[dict[str, Any]]] = {system: [] for system in args.systems}

    def start(kind: str, work: Path) -> System:
        if kind == "hutch":
            return Hutch(args, work)
        assert lib is not None
        return Kafka(args, work, lib)

    with tempfile.TemporaryDirectory(prefix="hutch-stream-bench-") as scratch:
        work = Path(scratch)
        checkpoints.configure(spark, scratch)
        if args.warm_up:
            for kind in args.systems:
                print(f"warm-up on {kind} (discarded)", flush=True)
                system = start(kind, work)
                try:
                    measure(spark, system, work, warm_up=True, index=0)
                finally:
                    system.stop()
        for index, order in enumerate(rounds.orders(args.systems, args.repeat)):
            for kind in order:
                print(f"round {index + 1}/{args.repeat}: {kind}", flush=True)
                system = start(kind, work)
                try:
                    sample = measure(spark, system, work, warm_up=False, index=index + 1)
                finally:
                    system.stop()
                sample["round"] = index
                print(f"  {flatten(sample)} load {sample['load']}", flush=True)
                samples[kind].append(sample)
    spark.stop()
    summary = summarize(samples)
    results["summary"] = summary
    results["samples"] = samples
    every = [sample for rows in samples.values() for sample in rows]
    results["machine_load"] = rounds.busiest(every)
    print("\n".join(report_lines(summary, args.partitions)))
    print(results["machine_load"])
    rounds.write_results(results, args.output, "stream")


if __name__ == "__main__":
    main()
