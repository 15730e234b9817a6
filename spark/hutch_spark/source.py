"""The `hutch` PySpark data source: a streaming queue source, a batch reader, and the sink hooks.

Where it runs (PySpark 4.3, design: spark.md §1-2):
- `HutchDataSource` is built several times on the driver (lookup, create, planning, runner);
  nothing here may connect in `__init__`.
- `HutchStreamReader` lives for the whole query in the driver's streaming runner process. It
  connects lazily (first `initialOffset`/`latestOffset`) through a `QueueConsumer` thread and
  is the only place that acks, because delivery tags are scoped to its channel.
- Executors only call `read(partition)`, on a copy of the reader pickled from a planning
  worker: the rows travel inside the partitions, as Arrow IPC bytes.

The ack protocol: `latestOffset(start)` first acks every batch ending at or below `start`
(Spark asks for data after `start` only once the batch ending there is in the commit log, and
it calls `commit()` only when it plans the next batch, so acking only in `commit()` deadlocks
when prefetch <= batch size); `commit(end)` acks through `end` as well. A batch that Spark
logged but did not commit replays empty after a restart: its messages were re-queued by the
broker and arrive again. With `durableBatches=true` it replays identically (batchlog.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from hutch_spark import batchreads, connections, offsets, options, records, sink
from hutch_spark.batchlog import BatchLog
from hutch_spark.consumer import QueueConsumer
from hutch_spark.errors import HutchOptionError

log = logging.getLogger(__name__)

FIRST_CONNECT_WAIT_S = 10.0  # lets a missing queue or a bad login fail the first batch


class HutchDataSource(DataSource):
    """`spark.dataSource.register(HutchDataSource)`, then `format("hutch")`."""

    @classmethod
    def name(cls) -> str:
        return "hutch"

    def schema(self) -> StructType:
        # Only reads ask for the schema, so this is where bad read options fail fast.
        options.parse_source_options(self.options)
        return records.SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return HutchBatchReader(options.parse_source_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        _check_schema(schema)
        return HutchStreamReader(options.parse_source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        settings = options.parse_sink_options(self.options, overwrite=overwrite)
        return sink.HutchBatchWriter(settings, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - PySpark's name
        settings = options.parse_sink_options(self.options, overwrite=overwrite)
        return sink.HutchStreamWriter(settings, schema)


class HutchPartition(InputPartition):
    """A contiguous seq range of one micro-batch, its rows as an Arrow IPC stream."""

    def __init__(self, *, first_seq: int, rows: int, payload: bytes) -> None:
        super().__init__((first_seq, rows))
        self.payload = payload

    def __repr__(self) -> str:
        return f"HutchPartition(first_seq={self.value[0]}, rows={self.value[1]})"


class HutchStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming source; one instance per query in the driver's runner (see module doc)."""

    def __init__(self, settings: options.SourceOptions) -> None:
        self._settings = settings
        self._consumer: QueueConsumer | None = None
        self._ledger = offsets.AckLedger()
        self._planned: dict[tuple[int, int], pa.RecordBatch] = {}
        self._batch_log = (
            BatchLog(settings.batch_log_dir)
            if settings.durable_batches and settings.batch_log_dir
            else None
        )
        self._available_now_budget: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a pickled copy: settings only, never the connection or its thread.
        return {"settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"])  # type: ignore[misc]

    # --- driver: planning ------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        self._ensure_consumer()
        return offsets.make(self._settings.queue, 0)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        return ReadMaxRows(self._settings.max_messages_per_batch)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        queue = self._settings.queue
        start_seq = offsets.seq_of(start, queue)
        consumer = self._ensure_consumer()
        self._release_through(start_seq)
        if self._batch_log is not None:
            staged = self._batch_log.find(start_seq)
            if staged is not None:
                end_seq, batch = staged
                self._planned[(start_seq, end_seq)] = batch
                return offsets.make(queue, end_seq)
        max_rows, max_bytes = self._limits(limit)
        if max_rows <= 0:
            return start
        deliveries = consumer.take(
            max_messages=max_rows,
            max_bytes=max_bytes,
            timeout_s=self._settings.poll_timeout_ms / 1000,
        )
        if not deliveries:
            return start
        end_seq = start_seq + len(deliveries)
        batch = records.to_record_batch(deliveries, first_seq=start_seq + 1)
        last = deliveries[-1]
        if self._batch_log is not None:
            self._batch_log.write(start_seq, end_seq, batch)
            consumer.ack_through(epoch=last.epoch, tag=last.tag)
        else:
            self._ledger.record(end_seq=end_seq, epoch=last.epoch, last_tag=last.tag)
        self._planned[(start_seq, end_seq)] = batch
        if self._available_now_budget is not None:
            self._available_now_budget -= len(deliveries)
        return offsets.make(queue, end_seq)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        # Drain what is there now (ready + buffered), nothing published later.
        consumer = self._ensure_consumer()
        self._available_now_budget = consumer.queue_depth(timeout_s=60.0)
        log.info(
            "hutch: availableNow will drain %d messages of queue %r",
            self._available_now_budget,
            self._settings.queue,
        )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        queue = self._settings.queue
        start_seq, end_seq = offsets.seq_of(start, queue), offsets.seq_of(end, queue)
        if start_seq == end_seq:
            return []
        batch = self._planned.get((start_seq, end_seq))
        if batch is None and self._batch_log is not None:
            batch = self._batch_log.read(start_seq, end_seq)
        if batch is None:
            log.warning(
                "hutch: batch (%d, %d] of queue %r was planned before a restart and replays "
                "empty; the broker re-queued its messages, which arrive again in later batches",
                start_seq,
                end_seq,
                queue,
            )
            return []
        return _split(batch, first_seq=start_seq + 1, parts=self._settings.num_partitions)

    def commit(self, end: dict[str, Any]) -> None:
        end_seq = offsets.seq_of(end, self._settings.queue)
        self._release_through(end_seq)
        if self._batch_log is not None:
            self._batch_log.delete_through(end_seq)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.stop()
            self._consumer = None

    # --- executors --------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, HutchPartition)  # noqa: S101 - Spark hands back our own
        with pa.ipc.open_stream(partition.payload) as stream:
            yield from stream

    # --- helpers ----------------------------------------------------------------------------

    def _ensure_consumer(self) -> QueueConsumer:
        if self._consumer is None:
            settings = self._settings
            arguments: dict[str, Any] = {}
            if settings.consumer_timeout_ms is not None:
                arguments["x-consumer-timeout"] = settings.consumer_timeout_ms
            consumer = QueueConsumer(
                parameters=connections.parameters(
                    settings.uri, connection_name=f"hutch-spark source {settings.queue}"
                ),
                queue=settings.queue,
                prefetch=settings.prefetch,
                exclusive=settings.exclusive,
                consumer_arguments=arguments,
            )
            consumer.start()
            self._consumer = consumer
            consumer.wait_until_consuming(FIRST_CONNECT_WAIT_S)
        return self._consumer

    def _release_through(self, seq: int) -> None:
        """Acks every planned batch ending at or below `seq` and forgets its rows."""
        for key in [key for key in self._planned if key[1] <= seq]:
            del self._planned[key]
        if self._consumer is None:
            return
        epoch = self._consumer.live_epoch
        tag = self._ledger.release_through(seq, epoch=epoch)
        if tag is not None and epoch is not None:
            self._consumer.ack_through(epoch=epoch, tag=tag)

    def _limits(self, limit: ReadLimit) -> tuple[int, int]:
        settings = self._settings
        max_rows = settings.prefetch if isinstance(limit, ReadAllAvailable) else 0
        max_bytes = settings.max_bytes_per_batch
        if isinstance(limit, ReadMaxRows):
            max_rows = min(limit.max_rows, settings.max_messages_per_batch)
        elif isinstance(limit, ReadMaxBytes):
            max_rows = settings.max_messages_per_batch
            max_bytes = min(limit.max_bytes, max_bytes)
        elif not isinstance(limit, ReadAllAvailable):
            max_rows = settings.max_messages_per_batch
        if self._available_now_budget is not None:
            max_rows = min(max_rows, self._available_now_budget)
        return max_rows, max_bytes


class HutchBatchReader(DataSourceReader):
    """`spark.read.format("hutch")`: one partition that reads up to maxMessages on an executor."""

    def __init__(self, settings: options.SourceOptions) -> None:
        self._settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return batchreads.read_queue(self._settings)


def _check_schema(schema: StructType) -> None:
    if schema.fieldNames() != records.SCHEMA.fieldNames():
        raise HutchOptionError(
            "hutch: the source has a fixed schema "
            f"({records.SCHEMA.simpleString()}); do not pass .schema(...)"
        )


def _split(batch: pa.RecordBatch, *, first_seq: int, parts: int) -> list[InputPartition]:
    """Contiguous row ranges, serialised so each partition carries only its own rows."""
    size = -(-batch.num_rows // parts)
    partitions: list[InputPartition] = []
    for offset in range(0, batch.num_rows, size):
        chunk = batch.slice(offset, size)
        sink_buffer = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink_buffer, chunk.schema) as writer:
            writer.write_batch(chunk)
        partitions.append(
            HutchPartition(
                first_seq=first_seq + offset,
                rows=chunk.num_rows,
                payload=sink_buffer.getvalue().to_pybytes(),
            )
        )
    return partitions
