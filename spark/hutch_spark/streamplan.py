"""Planning a stream read: offsets, limits, data loss and slices. Pure: no Spark, no broker.

Why this shape: a stream keeps every message at a dense offset, so a micro-batch is nothing but
a range `[start, end)` per stream, and the driver needs only each stream's bounds (the first
offset it still holds and its next offset, from the management API) to plan one. Executors
then read their slices on their own connections. Because the same offset names the same message
on every read, replaying a batch after a failure reads the same rows, and Spark's exactly-once
sinks need no dedupe (docs/spark.md, "Reading stream queues").

The rules are Spark's Kafka source's where the concept is the same:
- `startingOffsets` earliest/latest/JSON and `startingTimestamp` apply to a new query's first
  batch; latest, earliest and a timestamp are resolved when that batch is planned, in its end
  (see `initial` for why);
- `maxOffsetsPerTrigger` is shared among the streams in proportion to what each has waiting;
- `failOnDataLoss`: an offset the query still needs but retention already removed fails the
  query, naming the stream and the lost range; `false` skips to the first offset held, with a
  warning.

The checkpointed offset is `{"stream": next offset to read, ...}`, one entry per stream; in
batch 0's end, a stream whose start that batch resolved and reads from is `[end, start]`
(`logged_end`). A new query's start (`initial`) may hold Kafka's markers, -1 (latest) and -2
(earliest), for a stream not resolved yet: see `initial` for why. A super stream's offset
may leave out partitions added after it was written, which start at offset 0 (`with_added`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from hutch_spark.errors import HutchDataLossError, HutchOffsetError
from hutch_spark.streamoptions import EARLIEST, LATEST, OffsetSpec

UNRESOLVED = (LATEST, EARLIEST)  # a new query's start not resolved yet: batch 0's end


@dataclass(frozen=True)
class Bounds:
    """What a stream holds now: offsets `[first, next)` (first == next while it is empty)."""

    first: int
    next: int


@dataclass(frozen=True)
class Slice:
    """One executor task's part of a batch: offsets `[start, end)` of one stream."""

    stream: str
    start: int
    end: int


def resolve(spec: OffsetSpec, bounds: Mapping[str, Bounds]) -> dict[str, int]:
    """The offset of each stream for `spec` (earliest, latest, or an offset or marker each)."""
    result: dict[str, int] = {}
    for stream, held in bounds.items():
        value = spec if isinstance(spec, str) else spec[stream]
        if value in ("earliest", EARLIEST):
            result[stream] = held.first
        elif value in ("latest", LATEST):
            result[stream] = held.next
        else:
            assert isinstance(value, int)  # noqa: S101 - parsed by streamoptions
            result[stream] = value
    return result


def initial(spec: OffsetSpec, streams: Sequence[str]) -> dict[str, int]:
    """A new query's start: an offset per stream, or its marker (-1 latest, -2 earliest) where
    it is resolved only when batch 0 is planned.

    Why a marker: Spark writes a batch's end to the offsets log before it runs the batch, but
    not the first batch's start. A driver that dies inside batch 0 asks for the initial offset
    again when it restarts, and a start resolved then is not the one first planned: `latest`
    has moved on with the stream, and `earliest` has moved on with retention, so the replayed
    batch would read another range, and a head that retention removed in between would be
    skipped without the data-loss error `failOnDataLoss` promises (Kafka's source keeps its
    resolved start in a file under the checkpoint, a path a Python source is not given). Left
    unresolved, the start is resolved when batch 0 is planned and goes into batch 0's end,
    which Spark does log (`logged_end`): every attempt of batch 0 reads the same range from it
    (`batch_starts`), and a removed head is found like any other loss. A `startingTimestamp`
    start is unresolved for the same reason; an explicit offset is the same on every attempt.
    """
    result: dict[str, int] = {}
    for stream in streams:
        value = spec if isinstance(spec, str) else spec[stream]
        if value in ("latest", LATEST):
            result[stream] = LATEST
        elif value in ("earliest", EARLIEST):
            result[stream] = EARLIEST
        else:
            assert isinstance(value, int)  # noqa: S101 - parsed by streamoptions
            result[stream] = value
    return result


def resolve_start(marker: int, held: Bounds) -> int:
    """Where an unresolved start (`initial`) begins now: the first offset held for earliest,
    the next offset for latest."""
    return held.first if marker == EARLIEST else held.next


def logged_end(start: int, end: int) -> int | list[int]:
    """Batch 0's end of a stream whose start it resolved (`initial`): `[end, start]` when the
    batch reads something, so the offsets log carries the start its replay needs, else `end`
    (the start is the end: from latest, or an empty stream)."""
    return [end, start] if start < end else end


def batch_starts(
    starts: Mapping[str, int], ends: Mapping[str, int], carried: Mapping[str, int]
) -> dict[str, int]:
    """A batch's start per stream: an unresolved start (batch 0 of a stream read from latest,
    earliest or a timestamp) is the start batch 0's logged end carries (`logged_end`), or its
    end where it carries none (nothing to read), the same on every attempt."""
    return {
        stream: carried.get(stream, ends[stream]) if start in UNRESOLVED else start
        for stream, start in starts.items()
    }


def parse_offset(
    offset: Mapping[str, object],
    streams: tuple[str, ...],
    *,
    start: bool = False,
    grows: bool = False,
) -> dict[str, int]:
    """A checkpointed offset of this source; one of other streams is an error, not a reset.
    A `start` may also be a new query's `initial`, with unresolved streams (-1 or -2). With
    `grows` (a super stream's partitions) the offset may leave out streams: partitions added
    after it was written (`with_added`). Batch 0's `[end, start]` (`logged_end`) is its end
    here; `parse_end` also gives its start."""
    return {stream: end for stream, (end, _) in _entries(offset, streams, start, grows).items()}


def parse_end(
    offset: Mapping[str, object], streams: tuple[str, ...], *, grows: bool = False
) -> tuple[dict[str, int], dict[str, int]]:
    """A batch's logged end as `parse_offset` reads it, and the starts batch 0's end carries
    (`logged_end`), by stream: one parse of the end for `partitions`."""
    entries = _entries(offset, streams, False, grows)
    ends = {stream: end for stream, (end, _) in entries.items()}
    return ends, {stream: first for stream, (_, first) in entries.items() if first is not None}


def _entries(
    offset: Mapping[str, object], streams: tuple[str, ...], start: bool, grows: bool
) -> dict[str, tuple[int, int | None]]:
    names = set(offset)
    if names != set(streams) and not (grows and names <= set(streams)):
        removed = sorted(names - set(streams))
        why = (
            f"partition(s) {removed!r} are no longer bound to the super stream"
            if grows
            else f"this source reads streams {sorted(streams)!r}"
        )
        raise HutchOffsetError(
            f"hutch: the checkpoint holds offsets of streams {sorted(offset)!r}, but {why}; "
            "use a new checkpointLocation"
        )
    low = EARLIEST if start else 0
    result: dict[str, tuple[int, int | None]] = {}
    for stream in streams:
        if stream not in offset:
            continue
        value = offset[stream]
        if _offset(value, low):
            result[stream] = (value, None)
        elif isinstance(value, list) and len(value) == 2 and all(_offset(v, 0) for v in value):
            end, first = value
            if first >= end:
                raise HutchOffsetError(
                    f"hutch: malformed offset {dict(offset)!r}: stream {stream!r} has batch 0's "
                    f"[end, start] with a start {first} not below its end {end}"
                )
            result[stream] = (end, first)
        else:
            allowed = (
                "an offset >= 0, or -1 or -2 (not resolved yet)" if start else "an offset >= 0"
            )
            raise HutchOffsetError(
                f"hutch: malformed offset {dict(offset)!r}: stream {stream!r} must have {allowed}"
                ", or batch 0's [end, start]"
            )
    return result


def _offset(value: object, low: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def with_added(offset: Mapping[str, int], streams: Sequence[str]) -> dict[str, int]:
    """`offset` with each stream it leaves out (a super stream's partition added after it was
    written) at offset 0, the partition's first offset ever: as Kafka's source reads a
    partition it discovers from its earliest, and a head that retention already removed is
    data loss like any other (`readable_start`). Offset 0 rather than the first offset held
    now, so that a replayed batch reads the same range."""
    return {stream: offset.get(stream, 0) for stream in streams}


def readable_start(stream: str, start: int, held: Bounds, *, fail_on_data_loss: bool) -> int:
    """Where reading `stream` from `start` really begins, given what it holds.

    Below the first offset held, retention removed `[start, first)`; above the next offset, the
    stream is not the one the checkpoint was written for (deleted and declared again). Either
    is data loss: an error, or with failOnDataLoss=false the first offset held.
    """
    if held.first <= start <= held.next:
        return start
    if start < held.first:
        problem = (
            f"retention removed offsets [{start}, {held.first}) of stream {stream!r} before "
            f"this query read them (it needs them from offset {start}; the stream now holds "
            f"[{held.first}, {held.next}))"
        )
    else:
        problem = (
            f"stream {stream!r} ends at offset {held.next}, before the offset {start} this "
            "query already read up to: it was deleted and declared again, or is another "
            "broker's"
        )
    if fail_on_data_loss:
        raise HutchDataLossError(
            f"hutch: {problem}. Set failOnDataLoss=false to go on from offset {held.first} "
            "(what is lost stays lost), or start over with a new checkpointLocation"
        )
    return held.first


def data_loss_warning(stream: str, start: int, held: Bounds) -> str:
    """The warning logged when failOnDataLoss=false skips a range."""
    return (
        f"hutch: stream {stream!r}: offsets from {start} are no longer held (it holds "
        f"[{held.first}, {held.next})); failOnDataLoss=false, so reading goes on from "
        f"{held.first}"
    )


def limit_ends(
    starts: Mapping[str, int], tails: Mapping[str, int], max_offsets: int | None
) -> dict[str, int]:
    """Each stream's batch end: its tail, or with `max_offsets` a share of it.

    As in Spark's Kafka source the limit is shared in proportion to what each stream has
    waiting; the integer shares are rounded down and the rest handed out one by one to the
    streams with the most waiting (ties in option order), so a batch takes exactly
    min(max_offsets, everything waiting) and always makes progress.
    """
    waiting = {stream: max(tails[stream] - start, 0) for stream, start in starts.items()}
    total = sum(waiting.values())
    if max_offsets is None or total <= max_offsets:
        return {stream: starts[stream] + waiting[stream] for stream in starts}
    shares = {stream: max_offsets * lag // total for stream, lag in waiting.items()}
    rest = max_offsets - sum(shares.values())
    order = sorted(waiting, key=lambda stream: -(waiting[stream] - shares[stream]))
    for stream in order[:rest]:
        shares[stream] += 1
    return {stream: starts[stream] + shares[stream] for stream in starts}


def slices(stream: str, start: int, end: int, parts: int) -> list[Slice]:
    """`[start, end)` in up to `parts` contiguous slices of near-equal size, none empty."""
    count = end - start
    if count <= 0:
        return []
    parts = min(parts, count)
    size, extra = divmod(count, parts)
    result: list[Slice] = []
    low = start
    for index in range(parts):
        high = low + size + (1 if index < extra else 0)
        result.append(Slice(stream, low, high))
        low = high
    return result


def plan_slices(starts: Mapping[str, int], ends: Mapping[str, int], parts: int) -> list[Slice]:
    """A batch's slices, stream by stream in option order.

    A start above its end comes from a stream that was declared again, read with
    failOnDataLoss=false (`readable_start`): the batch then reads the new stream from its
    beginning, offset 0, and the executor skips what it no longer holds.
    """
    planned: list[Slice] = []
    for stream, end in ends.items():
        start = starts[stream]
        planned.extend(slices(stream, 0 if start > end else start, end, parts))
    return planned
