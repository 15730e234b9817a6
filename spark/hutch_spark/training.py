"""The workload the image's class-data archive is recorded from (``hutch_spark.classdata``).

Why this job: an archive holds the classes its recording run loaded, so that run should load
what a real windowed_counts run loads. It runs windowed_counts' own query (JSON parsing,
watermark, dedupe, windowed aggregation, the Parquet file sink, a checkpoint) with
availableNow, over a stand-in for the `hutch` source: a Python streaming data source with the
same schema, whose rows are built by ``records.to_record_batch`` and travel as Arrow IPC inside
``HutchPartition``\\ s, as the real source's do. Local mode runs the driver's and the executor's
side in one JVM. What it cannot load (the Kubernetes client, the executor backend, AMQP) is
loaded from the jars as before, so a gap costs time, never correctness.

Run by ``classdata.train`` as spark-submit's primary resource; ``DIR_ENV`` names a scratch
directory that the caller removes.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from hutch_spark import records, source
from hutch_spark.jobs import windowed_counts
from hutch_spark.properties import Properties

DIR_ENV = "HUTCH_TRAINING_DIR"
EVENTS = 600
PER_BATCH = 200  # three batches: the first plans and compiles, the others run warm paths
QUEUE = "training"


def deliveries(first: int, count: int) -> list[records.Delivery]:
    """Events as the consumer would hand them over: JSON bodies, a message id each."""
    base = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    made = []
    for seq in range(first, first + count):
        ts = base + datetime.timedelta(seconds=seq)
        body = {"type": ("click", "view")[seq % 2], "user": f"u{seq % 7}", "value": 1.0,
                "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ")}  # fmt: skip
        made.append(
            records.Delivery(
                epoch=1,
                tag=seq + 1,
                redelivered=False,
                exchange="events",
                routing_key="eu.click",
                properties=Properties(message_id=f"m-{seq}", content_type="application/json"),
                body=json.dumps(body).encode(),
                received_at_us=int(ts.timestamp() * 1_000_000),
            )
        )
    return made


class TrainingSource(DataSource):
    """The `hutch` source's schema and partitions, with made-up events instead of a queue."""

    @classmethod
    def name(cls) -> str:
        return "hutch-training"

    def schema(self) -> StructType:
        return records.SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        return TrainingReader()


class TrainingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        return {"seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        return ReadMaxRows(PER_BATCH)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        return {"seq": min(start["seq"] + PER_BATCH, EVENTS)}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        pass

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = start["seq"], end["seq"]
        batch = records.to_record_batch(deliveries(first, last - first), first_seq=first,
                                        queue=QUEUE)  # fmt: skip
        return source.split(batch, queue=QUEUE, first_seq=first, parts=2)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return source.read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass


def run(spark: SparkSession, work: str) -> int:
    """The query, drained with availableNow into ``work``; the number of window rows written."""
    spark.dataSource.register(TrainingSource)
    messages = spark.readStream.format(TrainingSource.name()).load()
    job = ["--queue", QUEUE, "--checkpoint", f"{work}/checkpoint", "--output", f"{work}/counts"]
    args = windowed_counts.parse_args([*job, "--available-now"])
    counts = windowed_counts.windowed_counts(messages, window=args.window, watermark=args.watermark)
    query = windowed_counts.sink(counts, args)
    query.awaitTermination()
    return spark.read.parquet(f"{work}/counts").count()


def main() -> None:
    work = os.environ[DIR_ENV]
    spark = windowed_counts.session(None, f"{work}/checkpoint")
    written = run(spark, work)
    spark.stop()
    if written == 0:
        raise SystemExit("training: the query wrote no window")


if __name__ == "__main__":
    main()
