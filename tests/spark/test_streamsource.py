"""The stream-queue source (option `streams`) against a real hutch-broker, Spark in local mode.

What is at stake (docs/spark.md, "Reading stream queues"): the driver plans from the management
API and the executors read their slices by offset, so

- a batch read of `[startingOffsets, endingOffsets)` returns exactly those offsets, each row the
  message published at that offset, and reading it again returns the same rows;
- a streaming query with the file sink, SIGKILLed in the middle of a batch, ends with every
  message exactly once: tests/spark/test_streamdriver.py (FileSinkMidBatch), which shares the
  killed child driver with that module's batch-0 kill cases;
- retention that removed offsets the checkpoint still needs fails the query naming the stream
  and the range, and `failOnDataLoss=false` goes on from the first offset held;
- the sink publishes into a stream.

Stream offsets come from hutch-broker's management API (RabbitMQ 3.10.8 reports none), so these
run on hutch-broker only; the broker's stream semantics are compared with RabbitMQ's in
tests/sidebyside/test_streams.py.
"""

import base64
import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from hutch_demo.management import quote
from hutch_testing.relay import CountingRelay
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from tests.spark import querywaits
from tests.spark.streamrows import expected, offsets_and_ids

# One hutch-broker for the module, each test in a vhost of its own: the source's URI (amqp_url)
# names it, and what the tests read from the management API is that vhost's.
pytestmark = [pytest.mark.spark, pytest.mark.shared_broker]


class Streams:
    """Declares stream queues and publishes to them with confirms (message_id `<stream>-<n>`,
    so the n-th message of a stream is at offset n)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.vhost = quote(getattr(broker, "vhost", "/"))
        self.url = broker.amqp_url
        self.management_url = broker.http_url
        self.connection = pika.BlockingConnection(pika.URLParameters(self.url))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()
        self.counts: dict[str, int] = {}

    def declare(self, name: str, **arguments: Any) -> str:
        self.channel.queue_declare(
            name, durable=True, arguments={"x-queue-type": "stream", **arguments}
        )
        self.counts[name] = 0
        return name

    def publish(self, stream: str, count: int, *, size: int = 20) -> None:
        for _ in range(count):
            n = self.counts[stream]
            body = json.dumps({"n": n, "pad": "x" * size}).encode()
            properties = pika.BasicProperties(message_id=f"{stream}-{n}", delivery_mode=2)
            self.channel.basic_publish("", stream, body, properties)
            self.counts[stream] += 1

    def get(self, path: str) -> Any:
        """GET on the management API (basic auth)."""
        request = urllib.request.Request(self.management_url + path)  # noqa: S310 - loopback
        user, password = self.broker.credentials
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - loopback
            return json.load(reply)

    def item(self, name: str) -> Any:
        return self.get(f"/api/queues/{self.vhost}/{name}")

    def spark_connections(self) -> list[str]:
        """The names of the hutch-spark connections open in the test's vhost."""
        names = [
            str(item["client_properties"].get("connection_name", ""))
            for item in self.get(f"/api/vhosts/{self.vhost}/connections")
        ]
        return [name for name in names if name.startswith("hutch-spark")]

    def close(self) -> None:
        if self.connection.is_open:
            # Idle through a long child run, the broker may have dropped it (no heartbeats).
            with contextlib.suppress(pika.exceptions.AMQPError):
                self.connection.close()


@pytest.fixture
def streams(hutch_broker: Any) -> Iterator[Streams]:
    helper = Streams(hutch_broker)
    yield helper
    helper.close()


def reader(
    spark: Any, streams: Streams, names: str | None, *, batch: bool = True, **options: Any
) -> Any:
    """A stream read of `names` (None: the options name a superStream instead)."""
    base = spark.read if batch else spark.readStream
    frame = (
        base.format("hutch")
        .option("uri", streams.url)
        .option("managementUri", streams.management_url)
    )
    if names is not None:
        frame = frame.option("streams", names)
    for key, value in options.items():
        frame = frame.option(key, value if isinstance(value, str) else json.dumps(value))
    return frame.load()


def test_batch_read_of_a_range_reads_exactly_those_offsets_twice(
    spark: Any, streams: Streams
) -> None:
    a, b = streams.declare("orders-0"), streams.declare("orders-1")
    streams.publish(a, 120)
    streams.publish(b, 45)
    frame = reader(
        spark,
        streams,
        "orders-0,orders-1",
        startingOffsets={"orders-0": 17, "orders-1": -2},
        endingOffsets={"orders-0": 101, "orders-1": -1},
        numPartitions="3",
    )
    assert frame.rdd.getNumPartitions() == 6  # 3 slices per stream, each its own task
    first = offsets_and_ids(frame)
    assert first == expected(a, 17, 101) + expected(b, 0, 45)
    assert offsets_and_ids(frame) == first  # a second read of the range: the same rows

    everything = reader(spark, streams, "orders-0,orders-1")  # earliest to latest
    assert everything.columns[:3] == ["stream", "offset", "message_id"]
    assert offsets_and_ids(everything) == expected(a, 0, 120) + expected(b, 0, 45)
    row = everything.where("stream = 'orders-0' AND offset = 3").collect()[0]
    assert json.loads(row.body)["n"] == 3
    assert row.headers["x-stream-offset"] == "3"
    assert row.exchange == ""
    assert row.routing_key == "orders-0"
    # Every task closed its channel; its worker keeps the connection for its next slice.
    kept = streams.spark_connections()
    assert all(name.startswith("hutch-spark stream reader (pid ") for name in kept), kept
    assert streams.item(a)["consumers"] == streams.item(b)["consumers"] == 0


def test_a_streaming_query_follows_the_tail_with_no_consumer_in_the_driver(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    name = streams.declare("tail")
    streams.publish(name, 30)
    batches: list[list[int]] = []

    def collect(frame: Any, _batch: int) -> None:
        batches.append(sorted(row.offset for row in frame.select("offset").collect()))

    frame = reader(
        spark, streams, name, batch=False, startingOffsets="earliest", maxOffsetsPerTrigger="10"
    )
    query = (
        frame.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        querywaits.wait_count(
            "30 rows", lambda: sum(map(len, batches)), 30, query, "rows collected", active=True
        )
        # Batch 0 reads from where earliest starts, which its logged end carries
        # (streamplan.initial): no empty first batch.
        assert batches[:3] == [list(range(n, n + 10)) for n in (0, 10, 20)]
        # Between triggers (a 200 ms trigger with nothing left to read): a trigger that never
        # ends shows as the query's status and last progress standing still.
        querywaits.wait_idle("an idle trigger", query)
        # Between batches the driver holds nothing: it plans from the management API only.
        # An executor's Python worker keeps its reader connection for its next slice, idle:
        # its channel closed, so no consumer.
        kept = streams.spark_connections()
        assert all(name.startswith("hutch-spark stream reader (pid ") for name in kept), kept
        assert streams.item(name)["consumers"] == 0
        streams.publish(name, 5)
        querywaits.wait_count(
            "5 more rows", lambda: sum(map(len, batches)), 35, query, "rows collected", active=True
        )
    finally:
        query.stop()
    assert [offset for batch in batches for offset in batch] == list(range(35))


def test_available_now_micro_batches_reuse_the_workers_reader_connections(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    # Ten micro-batches of two slices each: a connection per slice would be twenty connects;
    # kept by the executors' Python workers between tasks, it is one per worker.
    name = streams.declare("reused")
    streams.publish(name, 200)
    port = streams.broker.amqp_port
    read: list[int] = []

    def collect(frame: Any, _batch: int) -> None:
        read.extend(row.offset for row in frame.select("offset").collect())

    with CountingRelay("127.0.0.1", port) as relay:
        frame = (
            spark.readStream.format("hutch")
            .option("uri", streams.url.replace(f":{port}/", f":{relay.port}/"))
            .option("managementUri", streams.management_url)
            .option("streams", name)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "20")
            .option("numPartitions", "2")
            .load()
        )
        query = (
            frame.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        querywaits.wait_ended(
            "an availableNow query of 200 rows", query, lambda: len(read), "rows collected"
        )
        assert query.exception() is None
        connects = relay.accepted
    assert sorted(read) == list(range(200))  # each once: the replay guarantee is untouched
    slices = 2 * sum(1 for progress in query.recentProgress if progress["numInputRows"])
    assert slices == 20
    assert 1 <= connects <= slices // 2, f"{connects} connects for {slices} slices"


@pytest.mark.own_broker  # it restarts the broker
def test_a_broker_restart_between_micro_batches_costs_a_reconnect_not_the_query(
    spark: Any, hutch_broker: Any, tmp_path: Path
) -> None:
    # After the first micro-batch the broker restarts: the connections the executors' Python
    # workers kept are broken, and the next slices must replace them, not fail their tasks.
    streams = Streams(hutch_broker)
    name = streams.declare("restarted")
    streams.publish(name, 120)  # confirmed: on disk, so the restart keeps them
    streams.close()
    read: list[int] = []
    restarts: list[int] = []

    def collect(frame: Any, batch: int) -> None:
        read.extend(row.offset for row in frame.select("offset").collect())
        if not restarts:
            restarts.append(batch)
            hutch_broker.restart()

    query = (
        reader(
            spark, streams, name, batch=False, startingOffsets="earliest",
            maxOffsetsPerTrigger="40", numPartitions="2",
        )
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )  # fmt: skip
    querywaits.wait_ended(
        "an availableNow query across a restart", query, lambda: len(read), "rows collected"
    )
    assert query.exception() is None
    assert len(restarts) == 1
    assert sorted(read) == list(range(120))


def test_a_super_stream_is_read_through_its_partitions(spark: Any, streams: Streams) -> None:
    channel = streams.channel
    channel.exchange_declare("invoices", "direct", durable=True, arguments={"x-super-stream": True})
    for n in range(3):
        name = streams.declare(f"invoices-{n}")
        args = {"x-stream-partition-order": n}
        channel.queue_bind(name, "invoices", routing_key=str(n), arguments=args)
    for n in range(30):  # through the exchange, as a super-stream producer routes
        properties = pika.BasicProperties(message_id=f"i-{n}")
        channel.basic_publish("invoices", str(n % 3), b"{}", properties)
    frame = reader(
        spark,
        streams,
        None,
        superStream="invoices",
        startingOffsets={"invoices-0": 2, "invoices-1": -2, "invoices-2": -1},
    )
    rows = offsets_and_ids(frame)
    assert rows == [("invoices-0", n // 3, f"i-{n}") for n in range(6, 30, 3)] + [
        ("invoices-1", n // 3, f"i-{n}") for n in range(1, 30, 3)
    ]


def test_a_partition_added_to_a_running_super_stream_is_read_from_its_start(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    channel = streams.channel
    channel.exchange_declare("parts", "direct", durable=True, arguments={"x-super-stream": True})

    def partition(n: int) -> None:
        name = streams.declare(f"parts-{n}")
        args = {"x-stream-partition-order": n}
        channel.queue_bind(name, "parts", routing_key=str(n), arguments=args)

    def publish(n: int, count: int) -> None:
        for _ in range(count):  # through the exchange, as a super-stream producer routes
            offset = streams.counts[f"parts-{n}"]
            properties = pika.BasicProperties(message_id=f"parts-{n}-{offset}")
            channel.basic_publish("parts", str(n), b"{}", properties)
            streams.counts[f"parts-{n}"] += 1

    partition(0)
    partition(1)
    publish(0, 10)
    publish(1, 10)
    rows: list[tuple[str, int, str]] = []

    def collect(frame: Any, _batch: int) -> None:
        rows.extend(offsets_and_ids(frame))

    frame = reader(
        spark, streams, None, batch=False, superStream="parts", startingOffsets="earliest"
    )
    query = (
        frame.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        querywaits.wait_count("20 rows", lambda: len(rows), 20, query, "rows", active=True)
        partition(2)  # bound while the query runs, already holding messages when it is seen
        publish(2, 15)
        publish(0, 5)
        querywaits.wait_count("40 rows", lambda: len(rows), 40, query, "rows", active=True)
    finally:
        query.stop()
    assert sorted(rows) == (
        expected("parts-0", 0, 15) + expected("parts-1", 0, 10) + expected("parts-2", 0, 15)
    )


def test_batch_read_from_a_timestamp(spark: Any, streams: Streams) -> None:
    # AMQP timestamps are whole seconds: the second group starts in a later second than the
    # first group's last publish, and the moment given is inside that later second.
    name = streams.declare("timed")
    streams.publish(name, 20)
    time.sleep(1.1 - time.time() % 1)  # 0.1 s into the next second
    moment_ms = int(time.time() * 1000)
    streams.publish(name, 15)
    frame = reader(spark, streams, name, startingTimestamp=str(moment_ms))
    assert offsets_and_ids(frame) == expected(name, 20, 35)


def next_second() -> int:
    """Sleeps to 0.1 s into the next whole second (AMQP timestamps are seconds) and returns
    that moment in milliseconds since the epoch."""
    time.sleep(1.1 - time.time() % 1)
    return int(time.time() * 1000)


def test_batch_read_between_moments_per_stream(spark: Any, streams: Streams) -> None:
    # Kafka's startingOffsetsByTimestamp and endingTimestamp / endingOffsetsByTimestamp: each
    # stream from its own moment, to the first offset at or after the end's (excluded), or to
    # its end when nothing is that recent.
    a, b = streams.declare("a"), streams.declare("b")
    streams.publish(a, 10)
    streams.publish(b, 10)
    first = next_second()
    streams.publish(a, 5)  # a: 10-14
    streams.publish(b, 5)  # b: 10-14
    second = next_second()
    streams.publish(a, 5)  # a: 15-19
    streams.publish(b, 5)  # b: 15-19
    starts = {"a": first, "b": second}
    frame = reader(
        spark, streams, "a,b", startingOffsetsByTimestamp=starts, endingTimestamp=str(second)
    )
    assert offsets_and_ids(frame) == expected(a, 10, 15)  # b: [15, 15)
    later = second + 60_000
    frame = reader(
        spark,
        streams,
        "a,b",
        startingTimestamp=str(first),
        endingOffsetsByTimestamp={"a": second, "b": later},
    )
    assert offsets_and_ids(frame) == expected(a, 10, 15) + expected(b, 10, 20)


def test_a_start_with_nothing_after_its_moment_follows_the_strategy(
    spark: Any, streams: Streams
) -> None:
    a, b = streams.declare("a"), streams.declare("b")
    streams.publish(a, 3)
    moment = next_second()
    streams.publish(b, 4)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - Spark wraps our errors
        reader(spark, streams, "a,b", startingTimestamp=str(moment)).collect()
    text = str(caught.value)
    assert "HutchOffsetError" in text, text[:2000]
    assert (
        "no message was published at or after the starting moment in stream(s) 'a' "
        f"(moment {moment}, " in text
    ), text[:2000]
    frame = reader(
        spark,
        streams,
        "a,b",
        startingTimestamp=str(moment),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert offsets_and_ids(frame) == expected(b, 0, 4)  # a starts at its end, 3


def test_batch_read_errors_name_the_stream(spark: Any, streams: Streams, vhost: str) -> None:
    streams.declare("s")
    streams.publish("s", 5)
    streams.channel.queue_declare("classic", durable=True)
    cases = [
        ("nope", {}, f"stream 'nope' does not exist in vhost '{vhost}'"),
        ("classic", {}, f"queue 'classic' in vhost '{vhost}' is a classic queue, not a stream"),
        (
            "s",
            {"endingOffsets": {"s": 9}},
            "endingOffsets gives stream 's' the offset 9, past its end 5",
        ),
        (
            "s",
            {"maxOffsetsPerTrigger": "3"},
            "'maxOffsetsPerTrigger' is for streaming queries only",
        ),
    ]
    for names, options, message in cases:
        with pytest.raises(Exception) as caught:  # noqa: PT011 - Spark wraps our errors
            reader(spark, streams, names, **options).collect()
        assert message in str(caught.value), (names, str(caught.value)[:2000])


def test_retention_past_the_checkpoint_fails_or_skips_with_fail_on_data_loss(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    name = streams.declare(
        "kept", **{"x-max-length-bytes": 40_000, "x-stream-max-segment-size-bytes": 8_000}
    )
    streams.publish(name, 10, size=200)
    checkpoint = str(tmp_path / "checkpoint")
    seen: list[tuple[str, int, str]] = []

    def collect(frame: Any, _batch: int) -> None:
        seen.extend(offsets_and_ids(frame))

    def run(**options: Any) -> Any:
        frame = reader(spark, streams, name, batch=False, startingOffsets="earliest", **options)
        query = (
            frame.writeStream.foreachBatch(collect)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        querywaits.wait_ended("an availableNow query", query, lambda: len(seen), "rows collected")
        query.awaitTermination()  # at once: it ended (raises what failed it)
        return query

    run()
    assert seen == expected(name, 0, 10)
    streams.publish(name, 600, size=200)  # far past the 40 kB kept: old segments go
    item = streams.item(name)
    first = item["first_offset"]
    assert first > 10, item
    seen.clear()
    with pytest.raises(Exception) as caught:  # noqa: PT011 - Spark wraps our errors
        run()
    text = str(caught.value)
    assert f"retention removed offsets [10, {first}) of stream 'kept'" in text, text[:3000]
    assert seen == []

    run(failOnDataLoss="false")
    assert seen == expected(name, first, item["next_offset"])


def test_the_sink_publishes_into_a_stream(spark: Any, streams: Streams) -> None:
    name = streams.declare("sunk")
    data = spark.createDataFrame([(f"row-{n}",) for n in range(50)], "body string")
    (
        data.coalesce(1)
        .write.format("hutch")
        .mode("append")
        .option("uri", streams.url)
        .option("exchange", "")
        .option("routingKey", name)
        .save()
    )
    assert streams.item(name)["next_offset"] == 50
    rows = reader(spark, streams, name).select("offset", "body").collect()
    bodies = {row.offset: bytes(row.body).decode() for row in rows}
    assert bodies == {n: f"row-{n}" for n in range(50)}


class _GcProbe(DataSource):
    """Four partitions, each a row on the Python worker that read it: its pid, whether it read a
    stream slice before, and how many objects its collections skip (gc.freeze)."""

    @classmethod
    def name(cls) -> str:
        return "hutch-test-gc-probe"

    def schema(self) -> str:
        return "pid int, read_a_slice boolean, frozen long"

    def reader(self, schema: Any) -> DataSourceReader:
        return _GcProbeReader()


class _GcProbeReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        return [InputPartition(n) for n in range(4)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, bool, int]]:
        import gc  # in the worker
        import os
        import sys

        yield os.getpid(), "hutch_spark.streamreads" in sys.modules, gc.get_freeze_count()


def test_a_worker_that_read_a_slice_has_frozen_its_imports(spark: Any, streams: Streams) -> None:
    # docs/spark.md "Nothing for the worker's garbage collector to walk": pyspark's daemon collects
    # garbage after every task; the source's read() freezes what the worker tracks at its first
    # task, so those collections skip the imports. Spark reuses the workers that read the slices
    # for the next Python data source's tasks, which report on their process.
    name = streams.declare("frozen")
    streams.publish(name, 40)
    assert offsets_and_ids(reader(spark, streams, name, numPartitions="2")) == expected(name, 0, 40)
    spark.dataSource.register(_GcProbe)
    seen = {tuple(row) for row in spark.read.format(_GcProbe.name()).load().collect()}
    readers = [frozen for _pid, read, frozen in seen if read]
    assert readers, f"no probe ran in a worker that read a slice: {seen}"
    assert all(frozen > 0 for frozen in readers), seen
    # the control: a worker Spark started for the probe alone has frozen nothing
    assert all(frozen == 0 for _pid, read, frozen in seen if not read), seen
