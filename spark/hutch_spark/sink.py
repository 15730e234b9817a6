"""The `hutch` sink: `df.write` and `writeStream` with `format("hutch")` publish rows.

Why Arrow writers: a task gets its rows as Arrow record batches; reading a few columns with
`to_pylist()` is much cheaper than building a pyspark `Row` per message.

Each task opens one connection and publishes with pipelined confirms (publishing.py); its rows
are visible to consumers as soon as they are confirmed, so `commit()` only tallies counts: AMQP
has no two-phase commit. A retried task re-publishes the same rows with the same deterministic
`message_id`, `{queryId}:{batchId}:{partitionId}:{row}` for streams and
`{idPrefix or a driver-made UUID}:{partitionId}:{row}` for batch writes, unless the row brings
its own `message_id`. Consumers dedupe on it (docs/contracts/spark.md#sink).

Columns: `body` (BINARY, or STRING sent as UTF-8) is required; `routing_key`, `message_id`,
`headers` (MAP<STRING,STRING>), `content_type` and `correlation_id` are optional; any other
column is ignored. Headers `spark-query-id`, `spark-batch-id` (streams), `spark-partition` and
`spark-attempt` are added to every message.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, DataType, MapType, StringType, StructType

from hutch_spark import connections, workergc
from hutch_spark.errors import HutchOptionError, HutchPublishError
from hutch_spark.options import SinkOptions
from hutch_spark.publishing import ConfirmedPublisher, Outbound

log = logging.getLogger(__name__)

_OPTIONAL_COLUMNS: dict[str, DataType] = {
    "routing_key": StringType(),
    "message_id": StringType(),
    "headers": MapType(StringType(), StringType()),
    "content_type": StringType(),
    "correlation_id": StringType(),
}


class HutchCommitMessage(WriterCommitMessage):
    """What one task reports back: how many messages it published and had confirmed."""

    def __init__(self, partition_id: int, published: int) -> None:
        self.partition_id = partition_id
        self.published = published


class HutchBatchWriter(DataSourceArrowWriter):
    """`df.write.format("hutch")`; built on the driver, pickled to the tasks."""

    def __init__(self, settings: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema)
        self._settings = settings
        self._id_prefix = settings.id_prefix or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        workergc.freeze_imports()
        context = _task_context()
        partition = context.partitionId()
        published = publish_partition(
            iterator,
            settings=self._settings,
            id_base=f"{self._id_prefix}:{partition}",
            spark_headers={
                "spark-write-id": self._id_prefix,
                "spark-partition": str(partition),
                "spark-attempt": str(context.attemptNumber()),
            },
        )
        return HutchCommitMessage(partition, published)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("hutch sink: write %s published %d messages", self._id_prefix, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "hutch sink: write %s aborted after %d confirmed messages (they stay published)",
            self._id_prefix,
            _total(messages),
        )


class HutchStreamWriter(DataSourceStreamArrowWriter):
    """`writeStream.format("hutch")`; message ids come from the task's query and batch id."""

    def __init__(self, settings: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema)
        self._settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        workergc.freeze_imports()
        context = _task_context()
        partition = context.partitionId()
        query_id = context.getLocalProperty("sql.streaming.queryId") or "unknown-query"
        batch_id = context.getLocalProperty("streaming.sql.batchId") or "unknown-batch"
        published = publish_partition(
            iterator,
            settings=self._settings,
            id_base=f"{query_id}:{batch_id}:{partition}",
            spark_headers={
                "spark-query-id": query_id,
                "spark-batch-id": batch_id,
                "spark-partition": str(partition),
                "spark-attempt": str(context.attemptNumber()),
            },
        )
        return HutchCommitMessage(partition, published)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.info("hutch sink: batch %d published %d messages", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning(
            "hutch sink: batch %d aborted after %d confirmed messages (they stay published)",
            batchId,
            _total(messages),
        )


def check_sink_schema(schema: StructType) -> None:
    """Fails on the driver, before any task runs, when the columns cannot be published."""
    fields = {field.name: field.dataType for field in schema.fields}
    body = fields.get("body")
    if body is None:
        raise HutchOptionError(
            "hutch sink: the DataFrame needs a 'body' column (BINARY or STRING); "
            f"it has {', '.join(fields) or 'no columns'}"
        )
    if not isinstance(body, BinaryType | StringType):
        raise HutchOptionError(
            f"hutch sink: column 'body' must be BINARY or STRING, not {body.simpleString()}"
        )
    for name, expected in _OPTIONAL_COLUMNS.items():
        actual = fields.get(name)
        if actual is not None and actual.simpleString() != expected.simpleString():
            raise HutchOptionError(
                f"hutch sink: column {name!r} must be {expected.simpleString()}, "
                f"not {actual.simpleString()}"
            )


def publish_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    settings: SinkOptions,
    id_base: str,
    spark_headers: dict[str, str],
) -> int:
    """Publishes one task's rows with confirms; returns how many were confirmed."""
    params = connections.parameters(
        settings.uri, connection_name=f"hutch-spark sink {id_base}", ca_file=settings.ca_file
    )
    publisher = ConfirmedPublisher(
        params, window=settings.confirm_window, mandatory=settings.mandatory
    )
    messages = outbound_messages(
        batches, settings=settings, id_base=id_base, spark_headers=spark_headers
    )
    first = next(messages, None)
    if first is None:  # an empty partition opens no connection
        return 0
    return publisher.publish_all(itertools.chain([first], messages))


def outbound_messages(
    batches: Iterator[pa.RecordBatch],
    *,
    settings: SinkOptions,
    id_base: str,
    spark_headers: dict[str, str],
) -> Iterator[Outbound]:
    """The messages for a task's rows, with ids `{id_base}:{row}` where none is given."""
    delivery_mode = 2 if settings.persistent else 1
    row = 0
    for batch in batches:
        names = set(batch.schema.names)
        body = batch.column("body").to_pylist()
        optional = {
            name: batch.column(name).to_pylist() if name in names else None
            for name in _OPTIONAL_COLUMNS
        }
        for index, payload in enumerate(body):
            if payload is None:
                raise HutchPublishError(f"hutch sink: row {row} of {id_base} has a null body")
            headers: dict[str, Any] = dict(_value(optional["headers"], index) or ())
            headers.update(spark_headers)
            properties = pika.BasicProperties(
                message_id=_value(optional["message_id"], index) or f"{id_base}:{row}",
                headers=headers,
                content_type=_value(optional["content_type"], index),
                correlation_id=_value(optional["correlation_id"], index),
                delivery_mode=delivery_mode,
            )
            yield Outbound(
                exchange=settings.exchange,
                routing_key=_value(optional["routing_key"], index) or settings.routing_key,
                body=payload.encode("utf-8") if isinstance(payload, str) else payload,
                properties=properties,
            )
            row += 1


def _value(column: list[Any] | None, index: int) -> Any:
    return None if column is None else column[index]


def _task_context() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise HutchPublishError("hutch sink: write() must run inside a Spark task")
    return context


def _total(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.published for m in messages if isinstance(m, HutchCommitMessage))
