"""The data half of the chain: JSON events in, the Spark job over them, its results out.

Why: the quickstart and the e2e suite publish the same kind of event stream and run the same
job (``python -m hutch_spark.jobs.windowed_counts``) as a child process, so a kill -9 of the
driver is a real crash. Results are read from the Parquet sink through its ``_spark_metadata``
log, the file sink's commit record: part files of a batch that died before its commit are on
disk too, and counting them would report duplicates the job never committed.

Events carry an explicit ``message_id``; a few are published twice (a publisher retry), a few
with ``expiration=0`` (best-effort: dead-lettered when no consumer takes them at once), and a
final ``tick`` with a far-later event time moves the watermark so every window closes.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import pika

from hutch_demo import launchers

EVENT_TYPES = ("click", "view", "purchase")
JOB_MODULE = "hutch_spark.jobs.windowed_counts"


@dataclass(frozen=True)
class Event:
    message_id: str
    body: dict[str, Any]
    duplicate: bool = False  # published a second time with the same message_id
    expires: bool = False  # published with expiration 0

    @property
    def routing_key(self) -> str:
        return f"eu.{self.body['type']}"


@dataclass
class Stream:
    """The events of one run and what the broker did with them at publish time."""

    events: list[Event]
    tick: Event
    published: int = 0  # messages confirmed by the broker, duplicates and the tick included
    nacked: int = 0

    @property
    def unique_counted(self) -> int:
        """Events the job should count: each once, minus those dead-lettered before it ran."""
        return sum(1 for e in self.events if not e.expires)

    @property
    def duplicates(self) -> int:
        return sum(1 for e in self.events if e.duplicate)

    @property
    def expiring(self) -> int:
        return sum(1 for e in self.events if e.expires)

    def expected_counts(self) -> Counter[tuple[str, str]]:
        """(window start "HH:MM", type) -> events the job must report, for 1-minute windows."""
        counts: Counter[tuple[str, str]] = Counter()
        for event in self.events:
            if not event.expires:
                counts[(event.body["ts"][11:16], event.body["type"])] += 1
        return counts


def make_stream(
    count: int, *, prefix: str = "ev", duplicate_every: int = 25, expire_every: int = 50
) -> Stream:
    """``count`` events over the last ~5 minutes (1-minute windows), plus the closing tick."""
    now = datetime.datetime.now(datetime.UTC).replace(second=0, microsecond=0)
    base = now - datetime.timedelta(minutes=6)
    span = 300.0
    events = []
    for i in range(count):
        ts = base + datetime.timedelta(seconds=span * i / max(count, 1))
        body = {
            "type": EVENT_TYPES[i % len(EVENT_TYPES)],
            "user": f"user-{i % 17}",
            "value": round(1 + (i % 10) * 0.5, 2),
            "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        events.append(
            Event(
                message_id=f"{prefix}-{i:06d}",
                body=body,
                duplicate=duplicate_every > 0 and i % duplicate_every == 7,
                expires=expire_every > 0 and i % expire_every == 3,
            )
        )
    tick_ts = (base + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    tick = Event(f"{prefix}-tick", {"type": "tick", "user": "-", "value": 0, "ts": tick_ts})
    return Stream(events, tick)


def publish(
    endpoint: launchers.Endpoint,
    stream: Stream,
    *,
    exchange: str,
    routing_key: str | None = None,
    include_tick: bool = True,
    persistent: bool = False,
) -> Stream:
    """Publishes with confirms; each duplicate right after its original, the tick last;
    ``persistent`` sets delivery mode 2 (the message survives a broker restart)."""
    connection = pika.BlockingConnection(parameters(endpoint))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        batch = [e for ev in stream.events for e in ([ev, ev] if ev.duplicate else [ev])]
        if include_tick:
            batch.append(stream.tick)
        for event in batch:
            props = pika.BasicProperties(
                message_id=event.message_id,
                content_type="application/json",
                expiration="0" if event.expires else None,
                delivery_mode=2 if persistent else None,
            )
            try:
                channel.basic_publish(
                    exchange,
                    routing_key if routing_key is not None else event.routing_key,
                    json.dumps(event.body).encode(),
                    props,
                )
                stream.published += 1
            except pika.exceptions.NackError:
                stream.nacked += 1
    finally:
        connection.close()
    return stream


def parameters(endpoint: launchers.Endpoint) -> pika.URLParameters:
    """pika's parameters for ``endpoint``: with its CA, AMQPS verifying its server name."""
    params = pika.URLParameters(endpoint.amqp_url)
    context = endpoint.ssl_context
    if context is not None:
        params.ssl_options = pika.SSLOptions(context, endpoint.server_name or endpoint.host)
    return params


def publish_tick(endpoint: launchers.Endpoint, stream: Stream, *, exchange: str) -> None:
    """The tick alone (when the events went first and the job drained them)."""
    publish(endpoint, Stream([], stream.tick), exchange=exchange)
    stream.published += 1


# --- the Spark job ------------------------------------------------------------------------------


class JobOptions(TypedDict, total=False):
    """``JobRun``'s optional fields, as ``chain.Chain.job`` passes them on."""

    max_messages_per_batch: int
    extra_args: list[str]


@dataclass
class JobRun:
    """One run of the windowed_counts job: its directories and arguments."""

    queue: str
    work_dir: Path
    endpoint: launchers.Endpoint
    max_messages_per_batch: int = 500
    extra_args: list[str] = field(default_factory=list)

    @property
    def checkpoint(self) -> Path:
        return self.work_dir / "checkpoint"

    @property
    def output(self) -> Path:
        return self.work_dir / "counts"

    def command(self, *, available_now: bool, trigger: str = "1 second") -> list[str]:
        args = [
            sys.executable,
            "-m",
            JOB_MODULE,
            *("--queue", self.queue),
            *("--checkpoint", str(self.checkpoint)),
            *("--output", str(self.output)),
            *("--window", "1 minute"),
            *("--max-messages-per-batch", str(self.max_messages_per_batch)),
            *self.extra_args,
        ]
        return [*args, "--available-now"] if available_now else [*args, "--trigger", trigger]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        vhost = urllib.parse.quote("/", safe="")
        env.update(
            HUTCH_AMQP_URI=f"amqp://{self.endpoint.host}:{self.endpoint.amqp_port}/{vhost}",
            HUTCH_AMQP_USERNAME=self.endpoint.username,
            HUTCH_AMQP_PASSWORD=self.endpoint.password,
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            SPARK_LOCAL_IP=env.get("SPARK_LOCAL_IP", "127.0.0.1"),
            # local[2] and 2 shuffle partitions: the default 200 make each stateful
            # micro-batch schedule 200 tasks, seconds each on a 2-core machine.
            PYSPARK_SUBMIT_ARGS=(
                "--master local[2] --conf spark.sql.shuffle.partitions=2 "
                "--conf spark.ui.enabled=false --conf spark.sql.session.timeZone=UTC "
                "--driver-memory 1g pyspark-shell"
            ),
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self, *, available_now: bool, log_name: str = "job.log") -> launchers.Child:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        return launchers.spawn(
            "spark-job",
            self.command(available_now=available_now),
            self.work_dir / log_name,
            self.environment(),
        )

    def committed_batches(self) -> int:
        """Batches in the checkpoint's commit log (each one's offsets acked or about to be)."""
        commits = self.checkpoint / "commits"
        if not commits.is_dir():
            return 0
        return sum(1 for p in commits.iterdir() if p.name.isdigit())


def committed_files(output: Path, root: tuple[str, Path] | None = None) -> list[Path]:
    """The Parquet files the file sink committed, from its ``_spark_metadata`` log. The log
    holds the paths the job saw; ``root=(mount, here)`` maps a Pod's mount path to where the
    same volume is on this machine."""
    log_dir = output / "_spark_metadata"
    if not log_dir.is_dir():
        return []
    added: dict[str, None] = {}
    deleted: set[str] = set()
    for entry in sorted(log_dir.iterdir(), key=lambda p: p.name):
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:  # the first line is the version, "v1"
            if not line.strip():
                continue
            record = json.loads(line)
            target = deleted if record.get("action") == "delete" else added
            if isinstance(target, set):
                target.add(record["path"])
            else:
                target[record["path"]] = None
    paths = [Path(urllib.parse.urlparse(p).path) for p in added if p not in deleted]
    if root is not None:
        mount, here = root
        paths = [here / p.relative_to(mount) for p in paths]
    return paths


@dataclass(frozen=True)
class WindowCount:
    window_start: str  # "HH:MM"
    type: str
    events: int
    value_sum: float
    users: int


def read_results(output: Path, root: tuple[str, Path] | None = None) -> list[WindowCount]:
    """Rows of the committed Parquet files, sorted by window and type (``root``: as in
    ``committed_files``)."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - comes with the spark extra

    rows: list[WindowCount] = []
    for path in committed_files(output, root):
        for row in pq.read_table(path).to_pylist():
            rows.append(
                WindowCount(
                    window_start=row["window_start"].strftime("%H:%M"),
                    type=row["type"],
                    events=int(row["events"]),
                    value_sum=float(row["value_sum"] or 0.0),
                    users=int(row["users"]),
                )
            )
    return sorted(rows, key=lambda r: (r.window_start, r.type))


def counted(rows: list[WindowCount]) -> Counter[tuple[str, str]]:
    """(window, type) -> events, summed over rows (a window reported twice shows as double)."""
    counts: Counter[tuple[str, str]] = Counter()
    for row in rows:
        counts[(row.window_start, row.type)] += row.events
    return counts
