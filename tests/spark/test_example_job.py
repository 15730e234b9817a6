"""examples/spark-type-counts.py, the job docs/spark.md's "Run your own job" ships as a
ConfigMap, run in Spark's local mode against a real hutch-broker.

Why here too: the node test (tests/localkube/test_spark_node.py) runs it as Pods, which costs
minutes; this checks the job's own logic in seconds: the availableNow drain ends by
itself, every micro-batch writes its counts under ``batch=<id>``, and the sums are exact.
"""

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pika
import pyarrow.parquet as pq
import pytest

from tests.spark.examples import load_example
from tests.spark.querywaits import drain

pytestmark = pytest.mark.spark


def read_counts(output: Path) -> tuple[Counter[str | None], list[str]]:
    """The sum over every batch's files, and the batch directories."""
    totals: Counter[str | None] = Counter()
    batches = sorted(p.name for p in output.iterdir() if p.name.startswith("batch="))
    for part in output.glob("batch=*/*.parquet"):
        table = pq.read_table(part)
        for row in table.to_pylist():
            totals[row["type"]] += row["count"]
    return totals, batches


def test_the_example_job_counts_every_message_by_type(
    spark: Any, hutch_broker: Any, tmp_path: Path
) -> None:
    wanted = {"buy": 7, "click": 11, "view": 4}
    connection = pika.BlockingConnection(pika.URLParameters(hutch_broker.amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("events", durable=True)
    for kind, count in wanted.items():
        for n in range(count):
            body = json.dumps({"type": kind, "n": n}).encode()
            channel.basic_publish("", "events", body, pika.BasicProperties(delivery_mode=2))
    channel.basic_publish("", "events", b"not json")  # counted under a null type

    job = load_example("spark-type-counts.py")
    args = job.parse_args(
        [
            *("--queue", "events", "--uri", hutch_broker.amqp_url),
            *("--checkpoint", str(tmp_path / "checkpoint"), "--output", str(tmp_path / "out")),
            *("--max-messages-per-batch", "8"),
        ]
    )
    query = job.start(spark, args)
    drain("the availableNow drain's end", query, tmp_path / "checkpoint")

    totals, batches = read_counts(tmp_path / "out")
    assert totals == Counter({**wanted, None: 1})
    assert len(batches) >= 3, batches  # 23 messages in batches of at most 8
    assert channel.queue_declare("events", passive=True).method.message_count == 0
    connection.close()
