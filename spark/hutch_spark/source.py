"""The `hutch` PySpark data source: a streaming queue source, a batch reader, and the sink hooks.

Where it runs (PySpark 4.3; docs/contracts/spark.md#runtime and #ack-protocol):
- `HutchDataSource` is built several times on the driver (lookup, create, planning, runner);
  nothing here may connect in `__init__`.
- `HutchStreamReader` lives for the whole query in the driver's streaming runner process. It
  connects lazily (first `initialOffset`/`latestOffset`) through a `QueueConsumer` thread and
  is the only place that acks, because delivery tags are scoped to its channel.
- Executors only call `read(partition)`, on a copy of the reader pickled from a planning
  worker: the rows travel inside the partitions, as Arrow IPC bytes.
- With option `streams` the source reads stream queues instead (streamsource.py): the driver
  only plans offsets and each executor reads its own slice.

The ack protocol: `latestOffset(start)` first acks every batch ending at or below `start`
(Spark asks for data after `start` only once the batch ending there is in the commit log, and
it calls `commit()` only when it plans the next batch, so acking only in `commit()` deadlocks
when prefetch <= batch size); `commit(end)` acks through `end` as well. A batch that Spark
logged but did not commit replays empty after a restart: its messages were re-queued by the
broker and arrive again. With `durableBatches=true` it replays identically (batchlog.py).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
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

from hutch_spark import (
    batchreads,
    connections,
    offsets,
    options,
    records,
    sink,
    streamoptions,
    streamrecords,
    streamsource,
    workergc,
)
from hutch_spark.batchlog import BatchLog
from hutch_spark.consumer import QueueConsumer
from hutch_spark.errors import HutchConnectionError, HutchOptionError

log = logging.getLogger(__name__)

FIRST_CONNECT_WAIT_S = 10.0  # lets a missing queue or a bad login fail the first batch
_POLL_SLICE_S = 0.005  # with several queues, planning polls each in turn while all are empty


class HutchDataSource(DataSource):
    """`spark.dataSource.register(HutchDataSource)`, then `format("hutch")`."""

    @classmethod
    def name(cls) -> str:
        return "hutch"

    def schema(self) -> StructType:
        # Only reads ask for the schema, so this is where bad read options fail fast.
        if streamoptions.is_stream_read(self.options):
            streamoptions.parse_stream_options(self.options)
            return streamrecords.SCHEMA
        options.parse_source_options(self.options)
        return records.SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if streamoptions.is_stream_read(self.options):
            _check_schema(schema, streamrecords.SCHEMA)
            settings = streamoptions.parse_stream_options(self.options)
            streamoptions.check_batch(settings)
            return streamsource.HutchStreamsBatchReader(streamsource.resolved(settings))
        _check_schema(schema)
        return HutchBatchReader(options.parse_source_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        if streamoptions.is_stream_read(self.options):
            _check_schema(schema, streamrecords.SCHEMA)
            settings = streamoptions.parse_stream_options(self.options)
            streamoptions.check_streaming(settings)
            return streamsource.HutchStreamsReader(streamsource.resolved(settings))
        _check_schema(schema)
        return HutchStreamReader(options.parse_source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        settings = options.parse_sink_options(self.options, overwrite=overwrite)
        return sink.HutchBatchWriter(settings, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - PySpark's name
        settings = options.parse_sink_options(self.options, overwrite=overwrite)
        return sink.HutchStreamWriter(settings, schema)


class HutchPartition(InputPartition):
    """A contiguous seq range of one queue's part of a micro-batch, as an Arrow IPC stream."""

    def __init__(self, *, queue: str, first_seq: int, rows: int, payload: bytes) -> None:
        super().__init__((queue, first_seq, rows))
        self.payload = payload

    def __repr__(self) -> str:
        queue, first_seq, rows = self.value
        return f"HutchPartition(queue={queue!r}, first_seq={first_seq}, rows={rows})"


class _QueueStream:
    """One queue of a stream: its consumer thread, ack ledger, planned rows and batch log.

    With option `queues` a reader holds one per queue; each is planned, acked and replayed on
    its own, exactly as a single-queue source is (module docstring).
    """

    def __init__(self, settings: options.SourceOptions, queue: str) -> None:
        self.queue = queue
        self._settings = settings
        self.consumer: QueueConsumer | None = None
        self._ledger = offsets.AckLedger()
        self._planned: dict[tuple[int, int], pa.RecordBatch] = {}
        self.batch_log = _batch_log(settings, queue)
        # availableNow: messages still to take, measured on channel epoch `_budget_epoch`.
        self.available_now_budget: int | None = None
        self._budget_epoch: int | None = None

    def ensure_consumer(self) -> QueueConsumer:
        if self.consumer is None:
            settings = self._settings
            arguments: dict[str, Any] = {}
            if settings.consumer_timeout_ms is not None:
                arguments["x-consumer-timeout"] = settings.consumer_timeout_ms
            consumer = QueueConsumer(
                parameters=connections.parameters(
                    settings.uri,
                    connection_name=f"hutch-spark source {self.queue}",
                    ca_file=settings.ca_file,
                ),
                queue=self.queue,
                prefetch=settings.prefetch,
                exclusive=settings.exclusive,
                consumer_arguments=arguments,
            )
            consumer.start()
            self.consumer = consumer
        return self.consumer

    def staged(self, start_seq: int) -> int | None:
        """The end of a batch staged at `start_seq` before a restart (durable mode), if any."""
        if self.batch_log is None:
            return None
        staged = self.batch_log.find(start_seq)
        if staged is None:
            return None
        end_seq, batch = staged
        self._planned[(start_seq, end_seq)] = batch
        return end_seq

    def measure_available_now(self, timeout_s: float) -> int:
        """availableNow's budget: ready plus buffered messages, on the channel it was measured
        on. Waits for a channel while the consumer reconnects; fails if it gives up."""
        consumer = self.ensure_consumer()
        deadline = time.monotonic() + timeout_s
        while True:
            epoch = consumer.wait_for_epoch(max(deadline - time.monotonic(), 0.0))
            if epoch is None:
                raise HutchConnectionError(
                    f"hutch: could not consume from queue {self.queue!r} within "
                    f"{timeout_s:.0f} s to measure it for availableNow; last error: "
                    f"{consumer.last_error}"
                )
            try:
                depth = consumer.queue_depth(timeout_s=max(deadline - time.monotonic(), 1.0))
            except (HutchConnectionError, concurrent.futures.TimeoutError):
                if time.monotonic() >= deadline:
                    raise
                continue  # the channel closed under the declare: measure on the next one
            if consumer.live_epoch == epoch:
                self.available_now_budget = depth
                self._budget_epoch = epoch
                return depth

    def take(self, start_seq: int, limits: tuple[int, int], timeout_s: float) -> int:
        """Plans up to `limits` (rows, bytes) buffered messages after `start_seq`; the new end."""
        max_rows, max_bytes = limits
        if self.available_now_budget is not None:
            consumer = self.ensure_consumer()
            if consumer.live_epoch != self._budget_epoch:
                # The channel the budget was measured on is gone: the broker re-queued what we
                # held unacked, so the old count would stop the drain short (and an empty
                # buffer while reconnecting would end the query). Measure again on the new one.
                depth = self.measure_available_now(consumer.give_up_after_s + 60.0)
                log.info(
                    "hutch: queue %r consumed again on channel epoch %s; availableNow will "
                    "drain its %d messages",
                    self.queue,
                    self._budget_epoch,
                    depth,
                )
            max_rows = min(max_rows, self.available_now_budget)
        if max_rows <= 0:
            return start_seq
        consumer = self.ensure_consumer()
        deliveries = consumer.take(max_messages=max_rows, max_bytes=max_bytes, timeout_s=timeout_s)
        if not deliveries:
            return start_seq
        end_seq = start_seq + len(deliveries)
        batch = records.to_record_batch(deliveries, first_seq=start_seq + 1, queue=self.queue)
        last = deliveries[-1]
        if self.batch_log is not None:
            self.batch_log.write(start_seq, end_seq, batch)
            consumer.ack_through(epoch=last.epoch, tag=last.tag)
        else:
            self._ledger.record(end_seq=end_seq, epoch=last.epoch, last_tag=last.tag)
        self._planned[(start_seq, end_seq)] = batch
        if self.available_now_budget is not None:
            self.available_now_budget -= len(deliveries)
        return end_seq

    def partitions(self, start_seq: int, end_seq: int) -> list[InputPartition]:
        if start_seq == end_seq:
            return []
        batch = self._planned.get((start_seq, end_seq))
        if batch is None and self.batch_log is not None:
            batch = self.batch_log.read(start_seq, end_seq)
        if batch is None:
            log.warning(
                "hutch: batch (%d, %d] of queue %r was planned before a restart and replays "
                "empty; the broker re-queued its messages, which arrive again in later batches",
                start_seq,
                end_seq,
                self.queue,
            )
            return []
        return split(
            batch, queue=self.queue, first_seq=start_seq + 1, parts=self._settings.num_partitions
        )

    def release_through(self, seq: int) -> None:
        """Acks every planned batch ending at or below `seq` and forgets its rows."""
        for key in [key for key in self._planned if key[1] <= seq]:
            del self._planned[key]
        if self.consumer is None:
            return
        epoch = self.consumer.live_epoch
        tag = self._ledger.release_through(seq, epoch=epoch)
        if tag is not None and epoch is not None:
            self.consumer.ack_through(epoch=epoch, tag=tag)

    def commit(self, end_seq: int) -> None:
        self.release_through(end_seq)
        if self.batch_log is not None:
            self.batch_log.delete_through(end_seq)

    def stop(self) -> None:
        if self.consumer is not None:
            self.consumer.stop()
            self.consumer = None


class HutchStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming source; one instance per query in the driver's runner (see module doc)."""

    def __init__(self, settings: options.SourceOptions) -> None:
        self._settings = settings
        self._streams = {queue: _QueueStream(settings, queue) for queue in settings.queues}

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a pickled copy: settings only, never the connections or their threads.
        return {"settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"])  # type: ignore[misc]

    # --- driver: planning ------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        self._start_consumers()
        return self._offset(dict.fromkeys(self._streams, 0))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        return ReadMaxRows(self._settings.max_messages_per_batch)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        starts = self._seqs(start)
        self._start_consumers()
        for queue, stream in self._streams.items():
            stream.release_through(starts[queue])
        ends = dict(starts)
        for queue, stream in self._streams.items():
            staged = stream.staged(starts[queue])
            if staged is not None:
                ends[queue] = staged
        if ends != starts:
            return self._offset(ends)
        limits = self._limits(limit)
        # Every queue contributes what it has buffered now; only when none has anything does
        # planning wait, up to pollTimeoutMs, for the first message of any queue.
        for queue, stream in self._streams.items():
            ends[queue] = stream.take(starts[queue], limits, 0.0)
        deadline = time.monotonic() + self._settings.poll_timeout_ms / 1000
        slice_s = _POLL_SLICE_S if len(self._streams) > 1 else float("inf")
        while ends == starts:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for queue, stream in self._streams.items():
                ends[queue] = stream.take(starts[queue], limits, min(remaining, slice_s))
                if ends[queue] != starts[queue]:
                    break
        return self._offset(ends)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        # Drain what is there now (ready + buffered), nothing published later.
        for stream in self._streams.values():
            depth = stream.measure_available_now(timeout_s=60.0)
            log.info("hutch: availableNow will drain %d messages of queue %r", depth, stream.queue)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        starts, ends = self._seqs(start), self._seqs(end)
        planned: list[InputPartition] = []
        for queue, stream in self._streams.items():
            planned.extend(stream.partitions(starts[queue], ends[queue]))
        return planned

    def commit(self, end: dict[str, Any]) -> None:
        for queue, seq in self._seqs(end).items():
            self._streams[queue].commit(seq)

    def stop(self) -> None:
        for stream in self._streams.values():
            stream.stop()

    # --- executors --------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        workergc.freeze_imports()
        return read_partition(partition)

    # --- helpers ----------------------------------------------------------------------------

    def _start_consumers(self) -> None:
        """Starts every queue's consumer, then waits (once) until they consume or fail."""
        started = [stream.consumer is None for stream in self._streams.values()]
        consumers = [stream.ensure_consumer() for stream in self._streams.values()]
        deadline = time.monotonic() + FIRST_CONNECT_WAIT_S
        for fresh, consumer in zip(started, consumers, strict=True):
            if fresh:
                consumer.wait_until_consuming(max(deadline - time.monotonic(), 0.0))

    def _seqs(self, offset: dict[str, Any]) -> dict[str, int]:
        settings = self._settings
        return offsets.seqs_of(offset, settings.queues, per_queue=settings.per_queue_offsets)

    def _offset(self, seqs: dict[str, int]) -> dict[str, Any]:
        return offsets.make_many(seqs, per_queue=self._settings.per_queue_offsets)

    def _limits(self, limit: ReadLimit) -> tuple[int, int]:
        """Rows and bytes each queue may contribute to the batch being planned."""
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
        return max_rows, max_bytes


class HutchBatchReader(DataSourceReader):
    """`spark.read.format("hutch")`: one partition that reads up to maxMessages on an executor."""

    def __init__(self, settings: options.SourceOptions) -> None:
        self._settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(queue) for queue in self._settings.queues]  # one per queue

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        workergc.freeze_imports()
        return batchreads.read_queue(self._settings, partition.value)


def _check_schema(schema: StructType, fixed: StructType = records.SCHEMA) -> None:
    if schema.fieldNames() != fixed.fieldNames():
        raise HutchOptionError(
            f"hutch: the source has a fixed schema ({fixed.simpleString()}); do not pass "
            ".schema(...)"
        )


def _batch_log(settings: options.SourceOptions, queue: str) -> BatchLog | None:
    """`batchLogDir` itself for one queue; a subdirectory per queue with option `queues`."""
    if not (settings.durable_batches and settings.batch_log_dir):
        return None
    if not settings.per_queue_offsets:
        return BatchLog(settings.batch_log_dir)
    return BatchLog(Path(settings.batch_log_dir) / urllib.parse.quote(queue, safe=""))


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows ``split`` serialised into one partition, on the executor that reads it."""
    assert isinstance(partition, HutchPartition)  # noqa: S101 - Spark hands back our own
    with pa.ipc.open_stream(partition.payload) as stream:
        yield from stream


def split(batch: pa.RecordBatch, *, queue: str, first_seq: int, parts: int) -> list[InputPartition]:
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
                queue=queue,
                first_seq=first_seq + offset,
                rows=chunk.num_rows,
                payload=sink_buffer.getvalue().to_pybytes(),
            )
        )
    return partitions
