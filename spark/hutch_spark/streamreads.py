"""An executor task's read of one slice `[start, end)` of a stream, on its worker's connection.

Why here and how: the driver plans offsets only (streamplan.py); each task connects by itself,
so adding executors adds readers. A task sets `basic.qos` (a stream consumer's credit, which the
broker requires), consumes with `x-stream-offset: start`, acks only to return credit (acks do
not remove anything from a stream), and closes its channel once it has seen `end - 1`; the
connection stays open for the worker's next slice (streamwire.connect/release), so a query of
many micro-batches does not pay a TCP, TLS and AMQP handshake per slice. The connection is
streamwire's and the parsing streamframes': bulk reads into column lists, no pika object per
message.

`SliceCursor` is the pure part, one decision per delivered offset: a broker may start a
consumer at the beginning of the chunk holding `start` (a RabbitMQ consumer may,
docs/streams.md; hutch-broker starts exactly there), so offsets below `start` are skipped; an
offset above the expected one means retention removed the gap under the reader, which is data
loss (an error, or with failOnDataLoss=false a warning); an offset at or past `end` ends the
slice without being read.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator

import pika.exceptions
import pyarrow as pa

from hutch_spark import connections, failures, streamframes, streamwire
from hutch_spark.errors import HutchConnectionError, HutchDataLossError
from hutch_spark.streamoptions import StreamOptions
from hutch_spark.streamplan import Slice

log = logging.getLogger(__name__)

CHUNK_ROWS = 4096  # rows per Arrow batch handed to Spark while the slice is read (at least)


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

    Why: a stream consumer's credit is its prefetch, and whatever the broker sends past the
    slice's end it reads from its segments and sends for nothing (and a client such as pika
    rejects what is in flight when it cancels, which a stream answers by closing the connection
    with 540). So a reader lets the broker send exactly the
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

    def acked_through(self, count: int, first_offset: int, end: int) -> int:
        """The same rule for `count` deliveries seen so far, counted in bulk: how many to ack
        through now (multiple), or 0 for no ack yet."""
        if self._budget is None:
            self._budget = end - first_offset
        self._count = count
        last_ack = self._budget - self.prefetch
        target = min(count, last_ack)
        if target <= self._acked:
            return 0
        if target - self._acked >= self.every or target == last_ack:
            self._acked = target
            return target
        return 0


class ReadDeadline:
    """`readTimeoutMs` as a deadline: how long a read may go without a delivery of its slice.

    Why not the socket's timeout: a broker sends heartbeats (every 15 s at the 30 s this reader
    negotiates), and every frame that arrives ends a blocking read, so a per-read timeout longer
    than half the heartbeat never fires: a slice whose messages never come (a broker that stops
    delivering, a range it no longer serves and does not cancel) would wait for ever instead of
    failing the task so that Spark retries it. The clock starts when the read begins and
    restarts only when the count of deliveries grows; heartbeats and other frames do not move
    it. Pure: the caller passes the clock, and uses `wait_s` as the next read's socket timeout.
    """

    def __init__(self, timeout_s: float, now: float) -> None:
        self.timeout_s = timeout_s
        self._deliveries = 0
        self._at = now + timeout_s

    def wait_s(self, deliveries: int, now: float) -> float:
        """How long the next read may block, given the deliveries seen so far; raises
        TimeoutError once `timeout_s` has passed without a new one."""
        if deliveries != self._deliveries:
            self._deliveries = deliveries
            self._at = now + self.timeout_s
        left = self._at - now
        if left <= 0:
            raise TimeoutError(f"no delivery for {self.timeout_s:g} s")
        return left


def read_slice(settings: StreamOptions, slice_: Slice) -> Iterator[pa.RecordBatch]:
    """The rows of `slice_`, in offset order, in batches of about CHUNK_ROWS."""
    cursor = SliceCursor(slice_, fail_on_data_loss=settings.fail_on_data_loss)
    if cursor.done:
        return
    stream = slice_.stream
    name = f"hutch-spark stream reader (pid {os.getpid()})"  # kept for later slices
    params = connections.parameters(settings.uri, connection_name=name, ca_file=settings.ca_file)
    timeout_s = settings.read_timeout_ms / 1000
    parser = streamframes.SliceParser(stream, cursor)
    try:
        connection = streamwire.connect(params, timeout_s, parser, name)
    except (pika.exceptions.AMQPError, OSError, streamframes.FrameError) as error:
        description = failures.connect_failure(error, connections.endpoint(params))
        raise HutchConnectionError(
            f"hutch: cannot read stream {stream!r}: {description}"
        ) from error
    read_to_the_end = False
    try:
        yield from _consume(connection, parser, settings, cursor)
        read_to_the_end = True
    except streamwire.BrokerClosedError as error:
        raise HutchConnectionError(
            f"hutch: the broker refused to let us read stream {stream!r} from offset "
            f"{slice_.start}: {error.code} {error.text}"
        ) from error
    except TimeoutError as error:
        raise HutchConnectionError(
            f"hutch: no message of stream {stream!r} arrived for {timeout_s:g} s "
            f"while reading [{slice_.start}, {slice_.end}), expecting offset "
            f"{cursor.expected} (readTimeoutMs)"
        ) from error
    except (OSError, streamframes.FrameError) as error:
        raise HutchConnectionError(
            f"hutch: the connection broke while reading stream {stream!r} "
            f"[{slice_.start}, {slice_.end}) at offset {cursor.expected}: {error!r}"
        ) from error
    finally:
        # Nothing is in flight past the slice (Credit), and a stream keeps what a consumer was
        # sent: closing the channel or the connection rejects and loses nothing. A slice read
        # to its end keeps the connection for this worker's next task (streamwire.release);
        # an error or a read abandoned half-way closes it.
        if read_to_the_end:
            streamwire.release(connection, parser)
        else:
            connection.close(parser)


def _consume(
    connection: streamwire.StreamConnection,
    parser: streamframes.SliceParser,
    settings: StreamOptions,
    cursor: SliceCursor,
) -> Iterator[pa.RecordBatch]:
    slice_ = cursor.slice
    credit = Credit(settings.prefetch, slice_.end - slice_.start)
    deadline = ReadDeadline(settings.read_timeout_ms / 1000, time.monotonic())
    connection.consume(parser, slice_.stream, credit.prefetch, slice_.start)
    first_tag = 0
    # consume-ok can arrive in one read with the first deliveries (the whole credit, when the
    # broker is quick): they are counted and acked before the next blocking read, which would
    # otherwise wait for bytes the broker will not send until it gets credit back.
    while not cursor.done:
        if parser.deliveries and not first_tag:
            first_tag = parser.last_tag - parser.deliveries + 1
        if parser.first_offset is not None and not cursor.done:
            through = credit.acked_through(parser.deliveries, parser.first_offset, slice_.end)
            if through:
                connection.ack(first_tag + through - 1)  # tags count deliveries from first_tag
        if parser.rows >= CHUNK_ROWS:
            yield parser.take()
        if not cursor.done:
            connection.read(parser, deadline.wait_s(parser.deliveries, time.monotonic()))
    if parser.rows:
        yield parser.take()
