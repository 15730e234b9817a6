"""The windowed_counts pipeline job end to end: queue -> JSON -> dedupe -> windows -> Parquet."""

import json
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.spark.querywaits import drain

pytestmark = pytest.mark.spark


def event(amqp: Any, queue: str, message_id: str, body: object) -> None:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    amqp.channel.basic_publish("", queue, payload, pika.BasicProperties(message_id=message_id))


def test_job_counts_each_window_once_and_drops_duplicates(
    spark: Any, amqp: Any, tmp_path: Path
) -> None:
    queue = amqp.queue("events")
    for i, (kind, ts) in enumerate(
        [("click", "10:00:05"), ("click", "10:00:30"), ("view", "10:00:40"), ("click", "10:01:10")]
    ):
        event(
            amqp,
            queue,
            f"e{i}",
            {"type": kind, "user": f"u{i % 2}", "value": 1.5, "ts": f"2026-11-22T{ts}Z"},
        )
    event(
        amqp,
        queue,
        "e0",
        {"type": "click", "user": "u0", "value": 1.5, "ts": "2026-11-22T10:00:05Z"},
    )
    event(amqp, queue, "bad", b"not json")
    event(
        amqp, queue, "tick", {"type": "tick", "ts": "2026-11-22T11:00:00Z"}
    )  # moves the watermark

    from hutch_spark.jobs import windowed_counts

    args = windowed_counts.parse_args(
        [
            "--queue",
            queue,
            "--uri",
            amqp.url,
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--output",
            str(tmp_path / "counts"),
            "--available-now",
            "--window",
            "1 minute",
        ]
    )
    query = windowed_counts.start(spark, args)
    drain("the availableNow run's end", query, tmp_path / "checkpoint")

    rows = spark.read.parquet(str(tmp_path / "counts")).collect()
    counts = {
        (row.window_start.strftime("%H:%M"), row.type): (row.events, row.users) for row in rows
    }
    assert counts == {
        ("10:00", "click"): (2, 2),
        ("10:00", "view"): (1, 1),
        ("10:01", "click"): (1, 1),
    }


def test_job_arguments_are_checked() -> None:
    from hutch_spark.jobs import windowed_counts

    with pytest.raises(SystemExit):
        windowed_counts.parse_args(["--queue", "q", "--checkpoint", "/c"])  # no --output
    args = windowed_counts.parse_args(
        ["--queue", "q", "--checkpoint", "/c", "--sink", "exchange", "--exchange", ""]
    )
    assert args.exchange == ""
    assert args.master is None
