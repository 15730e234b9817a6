"""When to compact a queue log, and which segments: a pure policy over segment statistics.

A segment is deleted as soon as its last record is acked, which is all a FIFO queue ever needs.
Compaction exists for the other pattern: a few messages linger (held unacked, rejected to the
back, a slow priority) while the rest flow, so every old segment keeps one live record and the
log grows without bound.

Policy: the log is compacted when its garbage (bytes of acked records still on disk) exceeds
both ``SLACK_SEGMENTS`` whole segments and its live bytes. Then the sealed segments with at most
``MAX_LIVE_RATIO`` live are compacted, sparsest first, until the garbage is back under that
bound or ``READ_BUDGET_SEGMENTS`` segments' worth of files were read in this pass (compaction
runs at the end of ``sync()``, so one pass must never do unbounded work). Compacting a
segment copies its live records, with their msg_ids, to the end of the log (each re-sealed
for its new position, see ``records``);
the old segment is unlinked only after the copies were fsynced by the next sync. Disk use
therefore stays below about twice the live bytes plus ``SLACK_SEGMENTS + 1`` segments, and a
plain FIFO queue (garbage below one segment) never pays for a copy. "Old" is implied: only
sealed segments qualify, never the one being written.
"""

from __future__ import annotations

from collections.abc import Iterable

from hutch_broker.store.segments import Segment

SLACK_SEGMENTS = 4
MAX_LIVE_RATIO = 0.5
READ_BUDGET_SEGMENTS = 2  # segment files read per pass (plus one, if a single file is larger)


def pick(segments: Iterable[Segment], *, segment_size: int) -> list[Segment]:
    """Segments to compact now, sparsest first; empty when the log is within bounds."""
    active = [segment for segment in segments if not segment.retire_gen]
    live = sum(segment.live_bytes for segment in active)
    garbage = sum(_garbage(segment) for segment in active)
    allowance = max(SLACK_SEGMENTS * segment_size, live)
    if garbage <= allowance:
        return []
    chosen: list[Segment] = []
    read = 0
    for segment in sorted(filter(_eligible, active), key=_live_ratio):
        if chosen and read + segment.size > READ_BUDGET_SEGMENTS * segment_size:
            break
        chosen.append(segment)
        read += segment.size
        garbage -= _garbage(segment)
        if garbage <= allowance:
            break
    return chosen


def _eligible(segment: Segment) -> bool:
    return (
        segment.sealed
        and not segment.pending
        and bool(segment.live)
        and _live_ratio(segment) <= MAX_LIVE_RATIO
    )


def _garbage(segment: Segment) -> int:
    return max(segment.size - segment.data_start - segment.live_bytes, 0)


def _live_ratio(segment: Segment) -> float:
    return segment.live_bytes / max(segment.size - segment.data_start, 1)
