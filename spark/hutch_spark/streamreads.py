"""An executor task's read of one slice `[start, end)` of a stream, on its own connection.

Why here and how: the driver plans offsets only (streamplan.py); each task connects by itself,
so adding executors adds readers. A task sets `basic.qos` (a stream consumer's credit, which the
broker requires), consumes with `x-stream-offset: start`, acks only to return credit (acks do
not remove anything from a stream), and cancels and closes once it has seen `end - 1`.

`SliceCursor` is the pure part, one decision per delivered offset: a broker may start a
consumer at the beginning of the chunk holding `start` (a RabbitMQ consumer may,
docs/streams.md; hutch-broker starts exactly there), so offsets below `start` are skipped; an
offset above the expected one means retention removed the gap under the reader, which is data
loss (an error, or with failOnDataLoss=false a warning); an offset at or past `end` ends the
slice without being read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pika
import pika.exceptions
import pyarrow as pa

from hutch_spark import connections, failures, streamrecords
from hutch_spark.errors import HutchConnectionError, HutchDataLossError
from hutch_spark.streamoptions import StreamOptions
from hutch_spark.streamplan import Slice

log = logging.getLogger(__name__)

CHUNK_ROWS = 4096  # rows per Arrow batch handed to Spark while the slice is read
OFFSET_HEADER = "x-stream-offset"


class SliceCursor:
    """What to do with each delivered offset while reading `slice_`; see the module doc."""

    def __init__(self, slice_: Slice, *, fail_on_data_loss: bool) -> None:
        self.slice = slice_
        self.expected = slice_.start
        self.fail_on_data_loss = fail_on_data_loss
        self.done = slice_.start >= slice_.end
        self.lost: list[tuple[int, int]] = []  # ranges skipped with failOnDataLoss=false

    def accept(self, offset: int) -> bool:
        """True to keep the message at `offset` as a row; sets `done` after the last one."""
        if self.done or offset < self.expected:
            return False
        end = self.slice.end
        if offset > self.expected:
            self._lose(self.expected, min(offset, end))
        if offset >= end:
            self.done = True
            return False
        self.expected = offset + 1
        self.done = self.expected >= end
        return True

    def _lose(self, low: int, high: int) -> None:
        stream = self.slice.stream
        message = (
            f"hutch: stream {stream!r} no longer holds offsets [{low}, {high}) of the slice "
            f"[{self.slice.start}, {self.slice.end}) being read: retention removed them"
        )
        if self.fail_on_data_loss:
            raise HutchDataLossError(
                f"{message}. Set failOnDataLoss=false to skip them (what is lost stays lost)"
            )
        log.warning("%s; failOnDataLoss=false, so they are skipped", message)
        self.lost.append((low, high))


class Credit:
    """When to ack, so that the broker never sends past the slice's end.

    Why: a stream consumer's credit is its prefetch, and pika rejects the deliveries still in
    flight when a consumer is cancelled or its channel closed, which a stream answers by closing
    the connection (540 NOT_IMPLEMENTED). So a reader lets the broker send exactly the
    deliveries up to offset `end - 1`: the prefetch is at most the slice's size, and an ack
    (which grants more credit) is sent only while the credit it grants stays within the slice.
    The first delivery's offset fixes the count: a broker starting before `start` (at a chunk's
    beginning) sends more, one starting after it (retention) fewer.
    """

    def __init__(self, prefetch: int, wanted: int) -> None:
        self.prefetch = max(1, min(prefetch, wanted))
        self.every = max(1, self.prefetch // 2)
        self._budget: int | None = None  # deliveries up to the slice's end
        self._count = 0
        self._acked = 0

    def delivered(self, offset: int, end: int) -> bool:
        """Counts a delivery; True to ack through it (multiple)."""
        if self._budget is None:
            self._budget = end - offset
        self._count += 1
        last_ack = self._budget - self.prefetch  # acking it lets the broker send the rest
        if self._count > last_ack:
            return False
        if self._count - self._acked >= self.every or self._count == last_ack:
            self._acked = self._count
            return True
        return False


def read_slice(settings: StreamOptions, slice_: Slice) -> Iterator[pa.RecordBatch]:
    """The rows of `slice_`, in offset order, in batches of up to CHUNK_ROWS."""
    cursor = SliceCursor(slice_, fail_on_data_loss=settings.fail_on_data_loss)
    if cursor.done:
        return
    stream = slice_.stream
    params = connections.parameters(
        settings.uri,
        connection_name=f"hutch-spark stream read {stream} [{slice_.start}, {slice_.end})",
        ca_file=settings.ca_file,
    )
    try:
        connection = pika.BlockingConnection(params)
    except (pika.exceptions.AMQPError, OSError) as error:  # TLS and DNS errors come unwrapped
        description = failures.connect_failure(error, connections.endpoint(params))
        raise HutchConnectionError(
            f"hutch: cannot read stream {stream!r}: {description}"
        ) from error
    try:
        yield from _consume(connection, settings, cursor)
    except pika.exceptions.ChannelClosedByBroker as error:
        raise HutchConnectionError(
            f"hutch: the broker refused to let us read stream {stream!r} from offset "
            f"{slice_.start}: {error.reply_code} {error.reply_text}"
        ) from error
    except pika.exceptions.AMQPConnectionError as error:
        raise HutchConnectionError(
            f"hutch: the connection broke while reading stream {stream!r} "
            f"[{slice_.start}, {slice_.end}) at offset {cursor.expected}: {error!r}"
        ) from error
    finally:
        if connection.is_open:
            try:
                connection.close()
            except pika.exceptions.AMQPError as error:  # as for cancel() in _consume
                log.info("hutch: closing the reader of stream %r: %r", stream, error)


def _consume(
    connection: pika.BlockingConnection, settings: StreamOptions, cursor: SliceCursor
) -> Iterator[pa.RecordBatch]:
    slice_ = cursor.slice
    credit = Credit(settings.prefetch, slice_.end - slice_.start)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=credit.prefetch)
    rows: list[streamrecords.StreamDelivery] = []
    timeout_s = settings.read_timeout_ms / 1000
    deliveries = channel.consume(
        slice_.stream,
        auto_ack=False,
        arguments={OFFSET_HEADER: slice_.start},
        inactivity_timeout=timeout_s,
    )
    for method, properties, body in deliveries:
        if method is None:
            raise HutchConnectionError(
                f"hutch: no message of stream {slice_.stream!r} arrived for {timeout_s:.0f} s "
                f"while reading [{slice_.start}, {slice_.end}), expecting offset "
                f"{cursor.expected} (readTimeoutMs)"
            )
        offset = (properties.headers or {}).get(OFFSET_HEADER)
        if not isinstance(offset, int):
            raise HutchConnectionError(
                f"hutch: a delivery from stream {slice_.stream!r} has no {OFFSET_HEADER} "
                f"header (got {offset!r}); is {slice_.stream!r} a stream queue?"
            )
        if cursor.accept(offset):
            rows.append(
                streamrecords.StreamDelivery(
                    offset=offset,
                    exchange=method.exchange,
                    routing_key=method.routing_key,
                    properties=properties,
                    body=body,
                    received_at_us=time.time_ns() // 1000,
                )
            )
        if credit.delivered(offset, slice_.end) and not cursor.done:
            channel.basic_ack(method.delivery_tag, multiple=True)  # credit only
        if cursor.done:
            break
        if len(rows) >= CHUNK_ROWS:
            yield streamrecords.to_record_batch(slice_.stream, rows)
            rows = []
    if rows:
        yield streamrecords.to_record_batch(slice_.stream, rows)
    # Nothing is in flight past the slice (Credit), so cancelling rejects nothing: pika rejects
    # a consumer's unhandled deliveries when it cancels, and a stream answers basic.reject by
    # closing the connection (540). That happens only when retention moved the reader past the
    # slice's start, so more than the slice was in flight; every row is read by then.
    try:
        channel.cancel()
    except pika.exceptions.AMQPError as error:
        log.info("hutch: cancelling the reader of stream %r: %r", slice_.stream, error)
