"""The stream-queue readers of the `hutch` data source: planning on the driver, reading on
executors.

Why it differs from source.py: a classic queue can only be acked on the channel that received
a message, so the classic source consumes in the driver and ships rows to executors. A stream
is read by offset, so here the driver only plans: it asks the management API where each stream
begins and ends (streambounds.py), turns that into a range `[start, end)` per stream
(streamplan.py), and splits each range into `numPartitions` slices. Each executor task reads its
slice on its own connection (streamreads.py). Nothing is acked, buffered or held in the driver,
and `commit()` has nothing to do. A batch replayed after a failure reads the same offsets, hence
the same messages: with an exactly-once sink (the file sink, an idempotent `foreachBatch`) the
output holds each message once, with no dedupe (docs/spark.md, "Reading stream queues").

The driver's share per micro-batch is one management request (`latestOffset`), on the one
connection the reader keeps (streamhttp.py); the calls Spark makes around a query's start
(`prepareForTriggerAvailableNow`, `initialOffset` twice, the first `latestOffset`) share one,
and availableNow's last call, at the ends it snapshotted, needs none.
A new query from `latest`, `earliest` (or `startingTimestamp`) leaves its start unresolved and
resolves it when it plans batch 0, whose end Spark logs before running it; that end carries the
resolved start too (`[end, start]`, streamplan.logged_end), so every attempt of batch 0, also
after the driver died inside it, reads the same range, and a head that retention removed in
between is data loss as for any later batch (streamplan.initial says why this, and not a file
of our own beside the checkpoint). Batch 0 from earliest reads its share like any batch.

A super stream (`superStream`) is listed again at every plan that asks the broker (one more
request a trigger): a partition bound to it since is read from offset 0, as Kafka's source
reads a partition it discovers from its earliest (streamplan.with_added), and one no longer
bound fails the query, whose checkpoint holds offsets that would stop moving. availableNow
reads the partitions it found when it started.

While a query finds nothing new, it asks again at most every `IDLE_S`: Spark's default trigger
calls `latestOffset` about every 10 ms, 67 requests a second on an idle stream (measured); the
calls in between answer "nothing new" from the last look, at no cost to the broker, and the
first message after a quiet spell waits at most `IDLE_S` longer. A call that found something,
and availableNow, ask every time.

Both readers pickle to executors with their settings only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from time import monotonic
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from hutch_spark import (
    streambounds,
    streamhttp,
    streamoptions,
    streamplan,
    streamreads,
    streamtimes,
    workergc,
)
from hutch_spark.errors import HutchOffsetError, HutchOptionError
from hutch_spark.streamoptions import StreamOptions
from hutch_spark.streamplan import Bounds, Slice

log = logging.getLogger(__name__)

IDLE_S = 0.1  # after a call found nothing new, the next this soon answers from that look


class StreamSlice(InputPartition):
    """One task's slice: offsets `[start, end)` of one stream."""

    def __init__(self, slice_: Slice) -> None:
        super().__init__((slice_.stream, slice_.start, slice_.end))

    @property
    def slice(self) -> Slice:
        stream, start, end = self.value
        return Slice(stream, start, end)

    def __repr__(self) -> str:
        stream, start, end = self.value
        return f"StreamSlice(stream={stream!r}, start={start}, end={end})"


class HutchStreamsReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("hutch").option("streams", ...)`; see the module doc."""

    def __init__(self, settings: StreamOptions) -> None:
        self._settings = settings
        self._available_now: dict[str, int] | None = None  # the streams' ends to stop at
        self._initial: dict[str, int] | None = None  # a new query's start, resolved once
        self._unused: dict[str, Bounds] | None = None  # read at the start, not yet planned with
        self._quiet: tuple[dict[str, int], float] | None = None  # nothing new from here, then
        self._management: streamhttp.Session | None = None  # the kept connection, once asked
        self._grows = settings.super_stream is not None  # partitions may be added

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        # Spark asks for a new query's start to plan batch 0's end, again to plan its start, and
        # once more when a driver that died inside batch 0 restarts. So latest, earliest and a
        # timestamp stay unresolved here (-1, -2) and become batch 0's end (streamplan.initial):
        # the answer is the same on every call, and needs no request.
        if self._initial is None:
            settings = self._settings
            spec = settings.starting_offsets or "latest"
            if settings.starting_timestamp is not None:
                spec = "latest"  # unresolved too: resolved at the moment by latestOffset
            self._initial = streamplan.initial(spec, settings.streams)
            log.info("hutch: a new query starts reading streams at %s", self._initial)
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        limit = self._settings.max_offsets_per_trigger
        return super().getDefaultReadLimit() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        # Read what the streams hold now, nothing published later.
        self._available_now = {stream: held.next for stream, held in self._start_bounds().items()}
        log.info("hutch: availableNow reads the streams up to %s", self._available_now)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        given = streamplan.parse_offset(
            start, self._settings.streams, start=True, grows=self._grows
        )
        # "Nothing new" answers `start` itself, as Spark logged it (batch 0's end may carry
        # its start, which `given` leaves out): Spark runs a batch when the two differ.
        if given == self._available_now:
            return dict(start)  # availableNow has read all it is to read: nothing to ask
        quiet = self._quiet
        if quiet is not None and quiet[0] == given and monotonic() - quiet[1] < IDLE_S:
            return dict(start)  # nothing new a moment ago: no request yet
        self._quiet = None
        if self._grows and self._available_now is None:
            self._discover()
        settings = self._settings
        starts = streamplan.with_added(given, settings.streams)
        bounds = self._unused if self._unused is not None else self._bounds()
        self._unused = None  # each later trigger asks the broker: the streams move
        unresolved = {
            stream: start for stream, start in starts.items() if start in streamplan.UNRESOLVED
        }
        resolved = self._resolve_start(unresolved, bounds)
        readable = {
            stream: resolved[stream]
            if stream in resolved
            else self._readable(stream, starts[stream], bounds[stream])
            for stream in starts
        }
        tails = {stream: held.next for stream, held in bounds.items()}
        if self._available_now is not None:
            tails = {stream: min(tails[stream], self._available_now[stream]) for stream in tails}
        for stream in resolved:  # batch 0 reads such a stream from its resolved start
            readable[stream] = min(resolved[stream], tails[stream])
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        ends = streamplan.limit_ends(readable, tails, max_rows)
        if not resolved and all(ends[stream] == readable[stream] for stream in ends):
            if self._available_now is None:
                self._quiet = (given, monotonic())
            return dict(start)  # nothing new: no batch (and no batch only to skip a loss)
        # A resolved start goes into the logged end (streamplan.initial): a batch 0 even with
        # nothing to read, so that a restart reads from where this one resolved.
        return {
            stream: streamplan.logged_end(readable[stream], end) if stream in resolved else end
            for stream, end in ends.items()
        }

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        streams, grows = self._settings.streams, self._grows
        ends, carried = streamplan.parse_end(end, streams, grows=grows)
        given = streamplan.parse_offset(start, streams, start=True, grows=grows)
        starts = streamplan.batch_starts(streamplan.with_added(given, tuple(ends)), ends, carried)
        planned = streamplan.plan_slices(starts, ends, self._settings.num_partitions)
        return [StreamSlice(slice_) for slice_ in planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamSlice)  # noqa: S101 - Spark hands back our own
        workergc.freeze_imports()
        return streamreads.read_slice(self._settings, partition.slice)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: a stream keeps its messages, and nothing was consumed."""

    def stop(self) -> None:
        """Spark stops the query: the kept management connection is closed."""
        if self._management is not None:
            self._management.close()

    def _session(self) -> streamhttp.Session:
        if self._management is None:
            self._management = streamhttp.Session(self._settings)
        return self._management

    def _bounds(self) -> dict[str, Bounds]:
        return streambounds.fetch(self._settings, session=self._session())

    def _discover(self) -> None:
        """The super stream's partitions now (module doc): added ones join the streams read,
        after the known ones; one no longer bound fails the query."""
        settings = self._settings
        listed = streambounds.partitions(settings, session=self._session())
        known = settings.streams
        removed = [stream for stream in known if stream not in listed]
        if removed:
            raise HutchOffsetError(
                f"hutch: partition(s) {removed!r} are no longer bound to super stream "
                f"{settings.super_stream!r}; this query's checkpoint holds their offsets, so it "
                "cannot go on without them: bind them again, or use a new checkpointLocation"
            )
        added = tuple(stream for stream in listed if stream not in known)
        if added:
            log.info(
                "hutch: super stream %r has new partition(s) %s: read from offset 0",
                settings.super_stream,
                list(added),
            )
            self._settings = dataclasses.replace(settings, streams=known + added)

    def _resolve_start(
        self, markers: Mapping[str, int], bounds: Mapping[str, Bounds]
    ) -> dict[str, int]:
        """Where the streams a new query left unresolved start: their first offset held for
        earliest, their end now for latest, or their offset at their starting moment
        (streamtimes: one short consumer each)."""
        if not markers:
            return {}
        moments = self._settings.starting_timestamp
        if moments is None:
            found = {
                stream: streamplan.resolve_start(marker, bounds[stream])
                for stream, marker in markers.items()
            }
        else:
            held = {stream: bounds[stream] for stream in markers}
            at = streamoptions.moments_of(moments, tuple(markers))
            found = streamtimes.starts_at(self._settings, at, held)
        log.info("hutch: the first batch ends where the query starts reading: %s", found)
        return found

    def _start_bounds(self) -> dict[str, Bounds]:
        """The bounds read once when an availableNow query starts, for
        `prepareForTriggerAvailableNow` and the first `latestOffset` (Spark calls them one
        after the other): one management request, not two."""
        if self._unused is None:
            self._unused = self._bounds()
        return self._unused

    def _readable(self, stream: str, start: int, held: Bounds) -> int:
        readable = streamplan.readable_start(
            stream, start, held, fail_on_data_loss=self._settings.fail_on_data_loss
        )
        if readable != start:
            log.warning(streamplan.data_loss_warning(stream, start, held))
        return readable


class HutchStreamsBatchReader(DataSourceReader):
    """`spark.read.format("hutch").option("streams", ...)`: `[startingOffsets, endingOffsets)`."""

    def __init__(self, settings: StreamOptions) -> None:
        self._settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        settings = self._settings
        bounds = streambounds.fetch(settings)
        starts = starting_offsets(settings, bounds, default="earliest")
        ends = ending_offsets(settings, bounds)
        return [StreamSlice(slice_) for slice_ in plan_batch(settings, bounds, starts, ends)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamSlice)  # noqa: S101 - Spark hands back our own
        workergc.freeze_imports()
        return streamreads.read_slice(self._settings, partition.slice)


def resolved(settings: StreamOptions) -> StreamOptions:
    """The settings with a `superStream`'s partitions as its streams (a management API call on
    the driver, when the reader is made); as given otherwise."""
    if settings.super_stream is None:
        return settings
    streams = streambounds.partitions(settings)
    log.info("hutch: super stream %r has partitions %s", settings.super_stream, streams)
    return streamoptions.with_streams(settings, streams)


def starting_offsets(
    settings: StreamOptions, bounds: Mapping[str, Bounds], *, default: str
) -> dict[str, int]:
    """Where a new query or a batch read starts: its starting moments (startingTimestamp,
    startingOffsetsByTimestamp), startingOffsets, or the default (Kafka's: latest for a stream,
    earliest for a batch read)."""
    if settings.starting_timestamp is not None:
        moments = streamoptions.moments_of(settings.starting_timestamp, settings.streams)
        return streamtimes.starts_at(settings, moments, bounds)
    return streamplan.resolve(settings.starting_offsets or default, bounds)


def ending_offsets(settings: StreamOptions, bounds: Mapping[str, Bounds]) -> dict[str, int]:
    """Where a batch read ends: its ending moments (endingTimestamp, endingOffsetsByTimestamp),
    endingOffsets, or latest."""
    if settings.ending_timestamp is not None:
        moments = streamoptions.moments_of(settings.ending_timestamp, settings.streams)
        return streamtimes.ends_at(settings, moments, bounds)
    return streamplan.resolve(settings.ending_offsets or "latest", bounds)


def plan_batch(
    settings: StreamOptions,
    bounds: Mapping[str, Bounds],
    starts: Mapping[str, int],
    ends: Mapping[str, int],
) -> list[Slice]:
    """A batch read's slices: each range must lie within what its stream holds, else a clear
    error (or, for a start below the first offset with failOnDataLoss=false, the held part)."""
    planned: list[Slice] = []
    for stream in settings.streams:
        held, start, end = bounds[stream], starts[stream], ends[stream]
        if end > held.next:
            raise HutchOptionError(
                f"hutch: endingOffsets gives stream {stream!r} the offset {end}, past its end "
                f"{held.next} (offsets [{held.first}, {held.next}) are held)"
            )
        if start > end:
            raise HutchOptionError(
                f"hutch: stream {stream!r}: the starting offset {start} is after the ending "
                f"offset {end}"
            )
        readable = streamplan.readable_start(
            stream, start, held, fail_on_data_loss=settings.fail_on_data_loss
        )
        if readable != start:
            log.warning(streamplan.data_loss_warning(stream, start, held))
        planned.extend(streamplan.slices(stream, min(readable, end), end, settings.num_partitions))
    return planned
