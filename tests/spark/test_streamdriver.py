"""The stream source's driver side against a real hutch-broker, Spark in local mode: what the
driver asks the management API per micro-batch, and where a new query starts.

What is at stake (docs/spark.md, "Read stream queues"): the driver's work per micro-batch is
Spark's own machinery plus one management request of ours, so a query of N micro-batches asks
the broker N times, not once per call Spark makes (`prepareForTriggerAvailableNow`,
`initialOffset` twice, the final `latestOffset` that finds nothing); and a new query's starting
offsets are resolved once, though Spark asks for them twice (once to plan the first batch's end,
again to plan its start), so a stream that grows in between does not move the first batch's
start. Requests are counted on the wire: the source's `managementUri` points at a relay that
counts the HTTP requests (the reader keeps one connection for them all, so its connections are
no count of requests). An idle query with the default trigger asks at most every
`streamsource.IDLE_S`, not at each of Spark's 10 ms polls, on the connection it kept;
a query from `latest` whose driver is killed inside batch 0 replays the range batch 0 first
planned; and one from `earliest` killed there, whose stream's head retention then drops, fails
on its restart with failOnDataLoss=true and reads on from the first offset held with false;
and a query with Spark's file sink, SIGKILLed (driver JVM, its Python workers, executor tasks)
in the middle of a batch and restarted on its checkpoint, ends with every message exactly once
in the sink's committed output, with no dedupe anywhere: the killed batch is replayed from the
same offsets. Those three kills are one run 1: a child driver with a query per case, killed
once the first two block in batch 0 and the third's task hangs in batch 2 (a driver's start
was most of each case's run 1).
"""

import base64
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pika
import pytest
from hutch_demo.management import quote
from hutch_spark import streamsource
from hutch_testing.relay import CountingRelay

from tests.spark import childruns, querywaits, reruns
from tests.spark.conftest import idle_parameters
from tests.spark.streamrows import expected, offsets_and_ids

pytestmark = [pytest.mark.spark, pytest.mark.shared_broker]

CHILD = Path(__file__).with_name("stream_child.py")
# What grows while run 1 gets on (childruns.progress): each case's checkpoint and output.
DIRS = tuple(
    f"{case}/{name}"
    for case in ("latest", "headless", "filesink")
    for name in ("checkpoint", "output")
)


class Stream:
    """One stream queue in the test's vhost; message n is at offset n, its body `m<n>` and
    its message_id `<name>-<n>`."""

    def __init__(self, broker: Any, name: str, **arguments: int) -> None:
        self.broker = broker
        self.url = broker.amqp_url
        self.vhost = quote(getattr(broker, "vhost", "/"))
        self.name = name
        self.count = 0
        self.connection = pika.BlockingConnection(idle_parameters(self.url))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()
        arguments = {"x-queue-type": "stream", **arguments}
        self.channel.queue_declare(name, durable=True, arguments=arguments)

    def publish(self, count: int) -> None:
        for _ in range(count):
            n = self.count
            properties = pika.BasicProperties(message_id=f"{self.name}-{n}", delivery_mode=2)
            self.channel.basic_publish("", self.name, f"m{n}".encode(), properties)
            self.count += 1

    def held(self) -> tuple[int, int]:
        """The stream's `[first_offset, next_offset)` in the management API's queue object."""
        url = f"{self.broker.http_url}/api/queues/{self.vhost}/{quote(self.name)}"
        request = urllib.request.Request(url)  # noqa: S310 - loopback
        token = base64.b64encode(":".join(self.broker.credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - loopback
            item = json.load(reply)
        return item["first_offset"], item["next_offset"]

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def stream(hutch_broker: Any, request: pytest.FixtureRequest) -> Iterator[Stream]:
    made = Stream(hutch_broker, request.node.name[:60])
    yield made
    made.close()


def query(spark: Any, stream: Stream, management: str, **options: str) -> Any:
    frame = (
        spark.readStream.format("hutch")
        .option("uri", stream.url)
        .option("managementUri", management)
        .option("streams", stream.name)
    )
    for key, value in options.items():
        frame = frame.option(key, value)
    return frame.load()


def test_a_new_query_from_latest_starts_where_it_first_resolved_latest(
    spark: Any, hutch_broker: Any, stream: Stream, tmp_path: Path
) -> None:
    # A publisher in another connection keeps the stream growing while the query starts: Spark
    # asks the source for its initial offset to plan the first batch's end, and again to plan
    # its start. Resolved twice, "latest" moved in between, and the first batch started past
    # its end (read from offset 0) or skipped what came between.
    stream.publish(100)
    batches: list[list[int]] = []
    stop = threading.Event()

    def publish_until_stopped() -> None:
        publisher = Stream(hutch_broker, stream.name)
        try:
            while not stop.is_set():
                publisher.publish(5)
        finally:
            publisher.close()

    def collect(frame: Any, _batch: int) -> None:
        batches.append(sorted(row.offset for row in frame.select("offset").collect()))

    publisher = threading.Thread(target=publish_until_stopped, daemon=True)
    publisher.start()
    running = (
        query(spark, stream, hutch_broker.http_url)  # startingOffsets: latest, the default
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        querywaits.wait_count(
            "three batches", lambda: len(batches), 3, running, "batches collected", active=True
        )
    finally:
        running.stop()
        stop.set()
        publisher.join(30)
    read = [offset for batch in batches for offset in batch]
    assert read, "no rows read"
    first = read[0]
    assert first >= 100, f"the first batch read offset {first}, published before the query"
    assert read == list(range(first, first + len(read))), "a gap or a repeat in the offsets read"
    offsets = json.loads((tmp_path / "checkpoint" / "offsets" / "0").read_text().splitlines()[-1])
    assert offsets[stream.name] == len(batches[0]) + first


def run_available_now(spark: Any, stream: Stream, management: str, checkpoint: Path) -> Any:
    """An availableNow query of 20 offsets a batch into `foreachBatch`: the offsets it read and
    how many batches read rows."""
    read: list[int] = []

    def collect(frame: Any, _batch: int) -> None:
        read.extend(row.offset for row in frame.select("offset").collect())

    done = (
        query(spark, stream, management, startingOffsets="earliest", maxOffsetsPerTrigger="20")
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    querywaits.wait_ended("an availableNow query", done, lambda: len(read), "rows collected")
    assert done.exception() is None
    batches = sum(1 for progress in done.recentProgress if progress["numInputRows"])
    return sorted(read), batches


def test_one_management_request_per_micro_batch_and_a_restart_reads_on(
    spark: Any, hutch_broker: Any, stream: Stream, tmp_path: Path
) -> None:
    # availableNow makes Spark call prepareForTriggerAvailableNow, initialOffset (twice),
    # latestOffset per batch and once more to find nothing left: one request each was 14 for
    # 10 batches. The query's start reads the bounds once (and batch 0, which reads the first
    # 20 of the earliest start it resolves, plans from that look), and the last call knows from
    # the availableNow end that nothing is left: one request per batch.
    stream.publish(200)
    checkpoint = tmp_path / "checkpoint"
    with CountingRelay("127.0.0.1", urlsplit(hutch_broker.http_url).port) as relay:
        management = f"http://127.0.0.1:{relay.port}"
        read, batches = run_available_now(spark, stream, management, checkpoint)
        assert read == list(range(200))
        assert batches == 10
        asked = relay.requests
        assert asked == batches, f"{asked} requests for {batches} batches"

        # Restarted on its checkpoint (no initialOffset then): it reads on from offset 200.
        stream.publish(60)
        before = relay.requests
        read, batches = run_available_now(spark, stream, management, checkpoint)
        assert read == list(range(200, 260))
        assert batches == 3
        assert relay.requests - before == batches


def child_query(stream: Stream, work: Path, *options: str) -> list[str]:
    """One query of run 1 (stream_child.py's ``--query``): from `latest` (the source's
    default) into foreachBatch files under `work`, blocking in batch 0."""
    return [
        "--query", "--streams", stream.name,
        "--checkpoint", str(work / "checkpoint"), "--output", str(work / "output"),
        "--out", str(work), "--starting", "", "--sink", "batches", "--max-offsets", "40",
        "--block-batch", "0", *options,
    ]  # fmt: skip


def run_child(url: str, management: str, work: Path, queries: list[list[str]]) -> Any:
    """Run 1: one child driver with every case's query (stream_child.py)."""
    command = [sys.executable, str(CHILD), "--uri", url, "--management", management]
    for options in queries:
        command += options
    log = (work / "run1.log").open("wb")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def rerun(spark: Any, stream: Stream, management: str, work: Path, **options: str) -> Any:
    """A restart of run 1 in this session (reruns.py): `batches` as stream_child.py writes
    them, on run 1's checkpoint."""
    reader = query(spark, stream, management, numPartitions="2", **options)
    return reruns.start(reader, work / "checkpoint", output=work / "output", sink="batches")


def logged_end(checkpoint: Path, batch: int) -> dict[str, Any]:
    """The end Spark logged for `batch`: an offset per stream, or batch 0's [end, start] for a
    stream whose start it resolved and reads from (streamplan.logged_end)."""
    return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])


def written_batches(work: Path) -> dict[int, Any]:
    return {
        int(path.stem.split("-")[1]): json.loads(path.read_text())
        for path in (work / "output").glob("batch-*.json")
    }


class FromLatest:
    """A query from latest killed inside batch 0 replays the range it planned.

    Spark logs batch 0's end before running it, but not its start: a driver killed inside
    batch 0 asks the source for its initial offset again when it restarts. Resolved again,
    `latest` had moved on with the stream, and the replayed batch 0 read another range than the
    one the first attempt planned (before the fix: the whole stream, [0, end), since its start
    came after its end). A run 1 blocked in foreachBatch on batch 0 makes the window certain:
    offsets/0 is written, commits/0 is not."""

    def __init__(self, broker: Any, stream: Stream, work: Path) -> None:
        self.broker, self.stream, self.work = broker, stream, work
        work.mkdir()
        self.checkpoint = work / "checkpoint"
        self.stop = threading.Event()
        self.publisher = threading.Thread(target=self.publish_until_stopped, daemon=True)

    def publish_until_stopped(self) -> None:  # the stream grows while run 1 starts
        publisher = Stream(self.broker, self.stream.name)
        publisher.count = self.stream.count  # its bodies go on from `m<offset>`
        try:
            while not self.stop.wait(0.02):  # some hundreds a second, not the broker's all
                publisher.publish(5)
        finally:
            publisher.close()
            self.stream.count = publisher.count

    def before(self) -> list[str]:
        self.stream.publish(100)
        self.publisher.start()
        return child_query(self.stream, self.work)

    def killed(self) -> None:
        """Stops the publisher once run 1 blocked in batch 0 (or the test failed before)."""
        self.stop.set()
        if self.publisher.ident is not None:
            self.publisher.join(30)

    def after(self, spark: Any) -> None:
        stream, checkpoint = self.stream, self.checkpoint
        assert (checkpoint / "offsets" / "0").exists()
        assert not (checkpoint / "commits" / "0").exists()
        planned = logged_end(checkpoint, 0)[stream.name]
        assert planned >= 100, planned  # the stream's end when run 1 first planned

        assert not self.publisher.is_alive()
        stream.publish(50)  # more after the kill: latest moves on
        total = stream.count
        second = rerun(spark, stream, self.broker.http_url, self.work, maxOffsetsPerTrigger="40")
        reruns.run_to("run 2's end", second, checkpoint, {stream.name: total})

        assert logged_end(checkpoint, 0) == {stream.name: planned}  # Spark replayed the end
        batches = written_batches(self.work)
        assert batches[0] == [], f"the replayed batch 0 read {len(batches[0])} rows, planned none"
        read = sorted(offset for rows in batches.values() for _, offset, _ in rows)
        assert read == list(range(planned, total)), "a gap, a repeat or an older message"
        assert all(body == f"m{offset}" for rows in batches.values() for _, offset, body in rows)


class HeadRemoved:
    """A head removed before batch 0's replay is data loss, or skipped.

    A query from earliest killed inside batch 0; then retention drops the stream's head (small
    segments, a byte limit). The restarted driver asked for the initial offset again, and
    earliest resolved again was the new first offset: the replayed batch 0 skipped the removed
    head with no data-loss error, failOnDataLoss=true or not. Now batch 0's logged end carries
    the start it resolved (offset 0) with its end, so its replay reads the same range: run 2
    (failOnDataLoss=true) fails in the executor's read, naming the stream and the offsets gone,
    and run 3 (false) reads on from the first offset kept."""

    def __init__(self, broker: Any, work: Path) -> None:
        self.broker, self.work = broker, work
        work.mkdir()
        self.checkpoint = work / "checkpoint"
        self.stream = Stream(
            broker,
            "headless",
            **{"x-max-length-bytes": 100_000, "x-stream-max-segment-size-bytes": 10_000},
        )

    def before(self) -> list[str]:
        self.stream.publish(500)
        assert self.stream.held() == (0, 500)  # all kept while the query starts
        return child_query(
            self.stream, self.work, "--starting", "earliest", "--max-offsets", "1000"
        )

    def after(self, spark: Any) -> None:
        stream, checkpoint, work = self.stream, self.checkpoint, self.work
        management = self.broker.http_url
        assert not (checkpoint / "commits" / "0").exists()
        assert logged_end(checkpoint, 0)[stream.name] == [500, 0]  # batch 0 reads all from 0

        while stream.held()[0] == 0:  # until retention drops the oldest segment
            stream.publish(20)
        kept, total = stream.held()
        assert 0 < kept < 500, (kept, total)  # inside what run 1's batch 0 could read
        second = rerun(
            spark, stream, management, work,
            startingOffsets="earliest", maxOffsetsPerTrigger="1000", failOnDataLoss="true",
        )  # fmt: skip
        try:
            failure = reruns.run_to_failure("run 2's failure", second, checkpoint)
        finally:
            second.stop()
        # The replay's slices ([0, 250) and [250, 500) with numPartitions=2) start where
        # nothing is held; the task that fails first fails the query.
        losses = {
            f"'headless' no longer holds offsets [{low}, {min(kept, low + 250)}) of the slice "
            f"[{low}, {low + 250}) being read: retention removed them"
            for low in (0, 250)
            if low < kept
        }
        assert any(f"{loss}. Set failOnDataLoss=false" in failure for loss in losses), failure

        # The executor's warning goes to its Python worker's stderr (streamreads; the worker
        # forks from a daemon started before this test): what it skipped shows in batch 0.
        third = rerun(
            spark, stream, management, work,
            startingOffsets="earliest", maxOffsetsPerTrigger="1000", failOnDataLoss="false",
        )  # fmt: skip
        reruns.run_to("run 3's end", third, checkpoint, {stream.name: total})
        batches = written_batches(work)
        assert sorted(offset for _, offset, _ in batches[0]) == list(range(kept, 500))
        read = sorted(offset for rows in batches.values() for _, offset, _ in rows)
        assert read == list(range(kept, total)), "a gap, a repeat or a message no longer held"
        assert all(body == f"m{offset}" for rows in batches.values() for _, offset, body in rows)

    def close(self) -> None:
        self.stream.close()


def batch_read(spark: Any, stream: Stream, names: str, **ranges: dict[str, int]) -> Any:
    """A batch read of `names` (streams in `stream`'s vhost) over the ranges given."""
    frame = (
        spark.read.format("hutch")
        .option("uri", stream.url)
        .option("managementUri", stream.broker.http_url)
        .option("streams", names)
    )
    for key, value in ranges.items():
        frame = frame.option(key, json.dumps(value))
    return frame.load()


def committed_files(output: Path) -> set[str]:
    """The file names the file sink's log (`_spark_metadata`) lists as added."""
    names: set[str] = set()
    for log in (output / "_spark_metadata").iterdir():
        if log.name.startswith("."):
            continue
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("action") == "add":
                names.add(entry["path"].rsplit("/", 1)[-1])
    return names


class FileSinkMidBatch:
    """The file sink is exactly once across a driver killed in the middle of a batch.

    A query from earliest over two streams into Spark's file sink (Parquet), 100 offsets a
    trigger (50 of each stream): batch 0 reads the first 50 of each, and an executor task of
    batch 2 hangs at offset 130 of `kill-1`, so two batches were committed before the kill, the
    killed one had finished tasks that wrote files, and run 2 has three more batches after it. Run 2, the
    same query without the hang on run 1's checkpoint, replays the killed batch from the range
    logged for it, and the sink's committed output holds every message once, with no dedupe:
    the files the killed batch's finished tasks wrote are on disk but not in the sink's log."""

    TOTAL, HANG_OFFSET = 300, 130

    def __init__(self, broker: Any, work: Path) -> None:
        self.broker, self.work = broker, work
        work.mkdir()
        self.checkpoint, self.output = work / "checkpoint", work / "output"
        self.streams = [Stream(broker, name) for name in ("kill-0", "kill-1")]

    def before(self) -> list[str]:
        for each in self.streams:
            each.publish(self.TOTAL)
        return [
            "--query", "--streams", "kill-0,kill-1",
            "--checkpoint", str(self.checkpoint), "--output", str(self.output),
            "--out", str(self.work), "--starting", "earliest", "--max-offsets", "100",
            "--hang-stream", "kill-1", "--hang-offset", str(self.HANG_OFFSET),
        ]  # fmt: skip

    def after(self, spark: Any) -> None:
        total, checkpoint, output = self.TOTAL, self.checkpoint, self.output
        logged = sorted(int(path.name) for path in (checkpoint / "offsets").glob("[0-9]*"))
        committed = sorted(int(path.name) for path in (checkpoint / "commits").glob("[0-9]*"))
        killed = logged[-1]
        assert killed not in committed  # killed inside the batch
        assert killed >= 2  # and after some batches were committed
        end = logged_end(checkpoint, killed)
        start = logged_end(checkpoint, killed - 1)
        assert start["kill-1"] <= self.HANG_OFFSET < end["kill-1"]

        # Run 2, a restart on the checkpoint in this session (reruns.py): stream_child.py's
        # query without the hang, until it has committed everything.
        reader = (
            spark.readStream.format("hutch")
            .option("uri", self.streams[0].url)
            .option("managementUri", self.broker.http_url)
            .option("streams", "kill-0,kill-1")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "100")
            .option("numPartitions", "2")
            .load()
        )
        second = reruns.start(reader, checkpoint, output=output, sink="parquet")
        reruns.run_to("run 2's end", second, checkpoint, {"kill-0": total, "kill-1": total})
        assert logged_end(checkpoint, killed) == end  # the replay used the logged range

        # The killed batch's finished tasks had written their files; the file sink's log lists
        # only committed ones, which is what makes the output exactly once.
        on_disk = {path.name for path in output.glob("part-*.parquet")}
        orphans = sorted(on_disk - committed_files(output))
        assert orphans, "the kill left no uncommitted file: it did not hit the batch mid-way"
        orphan_rows = offsets_and_ids(spark.read.parquet(*(str(output / n) for n in orphans)))
        assert orphan_rows
        for name, offset, _ in orphan_rows:  # all of the killed batch's range
            assert start[name] <= offset < end[name]

        written = spark.read.parquet(str(output))  # committed files only
        rows = offsets_and_ids(written)
        assert rows == expected("kill-0", 0, total) + expected("kill-1", 0, total)  # each once
        replayed = written.where(
            f"(stream = 'kill-0' AND offset >= {start['kill-0']} AND offset < {end['kill-0']}) "
            f"OR (stream = 'kill-1' AND offset >= {start['kill-1']} AND offset < {end['kill-1']})"
        )
        again = batch_read(
            spark, self.streams[0], "kill-0,kill-1", startingOffsets=start, endingOffsets=end
        )  # the killed batch's range, read once more
        assert offsets_and_ids(again) == offsets_and_ids(replayed)
        assert len(offsets_and_ids(again)) == sum(end.values()) - sum(start.values())

    def close(self) -> None:
        for each in self.streams:
            each.close()


def test_a_killed_driver_replays_what_it_logged_in_batch_0_or_mid_batch_exactly_once(
    spark: Any, hutch_broker: Any, stream: Stream, tmp_path: Path
) -> None:
    # Three cases (FromLatest, HeadRemoved, FileSinkMidBatch) in one run 1: a child driver with
    # a query each, killed once the first two block in batch 0's foreachBatch and the third's
    # task hangs in batch 2. A driver's start was most of each case's run 1, and the kill is
    # the same for all; each case's restarts are queries in this session on its own
    # checkpoint (reruns.py).
    latest = FromLatest(hutch_broker, stream, tmp_path / "latest")
    headless = HeadRemoved(hutch_broker, tmp_path / "headless")
    filesink = FileSinkMidBatch(hutch_broker, tmp_path / "filesink")
    try:
        queries = [latest.before(), headless.before(), filesink.before()]
        first = run_child(stream.url, hutch_broker.http_url, tmp_path, queries)
        try:
            # The publisher stops once the query from latest has planned batch 0: all it
            # publishes until the kill is more for that case's run 2 to read, 40 a batch.
            childruns.wait_progressing(
                first, tmp_path, 1, "batch 0 of the query from latest",
                (tmp_path / "latest" / "blocked").exists, DIRS,
            )  # fmt: skip
            latest.killed()
            childruns.wait_progressing(
                first, tmp_path, 1, "batch 0 of the query from earliest",
                (tmp_path / "headless" / "blocked").exists, DIRS,
            )  # fmt: skip
            childruns.wait_progressing(
                first, tmp_path, 1, "the file sink query's hang",
                (tmp_path / "filesink" / "hang").exists, DIRS,
            )  # fmt: skip
        finally:
            childruns.end_group(first)
            latest.killed()
        latest.after(spark)
        headless.after(spark)
        filesink.after(spark)
    finally:
        latest.killed()
        headless.close()
        filesink.close()


def test_an_idle_default_trigger_query_asks_at_most_every_idle_interval(
    spark: Any, hutch_broker: Any, stream: Stream, tmp_path: Path
) -> None:
    # The default trigger calls latestOffset about every 10 ms; on an idle stream each call was
    # a management request (67 a second, measured). Now a call that finds nothing new is
    # answered from that look for IDLE_S, and a message published later still arrives.
    read: list[int] = []

    def collect(frame: Any, _batch: int) -> None:
        read.extend(row.offset for row in frame.select("offset").collect())

    with CountingRelay("127.0.0.1", urlsplit(hutch_broker.http_url).port) as relay:
        running = (
            query(spark, stream, f"http://127.0.0.1:{relay.port}")
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )  # no trigger: Spark's default, as soon as the last batch is done
        try:
            # Batch 0's commit: each step of the query's start writes a file in its checkpoint
            # (metadata, the source's initial offsets, batch 0's offsets, its commit). Not the
            # requests made or the query's status: an idle query changes both all the time.
            checkpoint = tmp_path / "checkpoint"
            querywaits.wait_state(
                "batch 0", (checkpoint / "commits" / "0").exists, running,
                "files in the checkpoint", lambda: sum(1 for _ in checkpoint.rglob("*")),
                active=True,
            )  # fmt: skip
            before, connected, started = relay.requests, relay.accepted, time.monotonic()
            time.sleep(3)  # the window measured: the query idles, polling all along
            asked, elapsed = relay.requests - before, time.monotonic() - started
            connections = relay.accepted - connected
            stream.publish(5)
            querywaits.wait_count(
                "the 5 messages", lambda: len(read), 5, running, "rows collected", active=True
            )
        finally:
            running.stop()
    assert 1 <= asked <= elapsed / streamsource.IDLE_S + 2, f"{asked} requests in {elapsed:.1f} s"
    assert connections == 0, f"{connections} connections for {asked} requests: none kept"
    assert read == [0, 1, 2, 3, 4]
