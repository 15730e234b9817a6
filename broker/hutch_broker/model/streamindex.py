"""A stream's index: one entry per store segment, never one per message; and retention.

Why per segment: a stream keeps every message after delivery, so an index per message would
grow with the log (a million messages, a million entries) while the memory watermark must
hold. A segment entry says where the segment's first record is (its store msg_id), which
offsets it holds (dense: ``first_offset`` to ``end``), how many bytes and which publish times
(first and last). A consumer starting at an offset finds its segment here (``locate``) and
reads forward from the segment's first record, at most one segment of reads, in slices
(``model.streams``); one starting at a timestamp finds the first segment whose last publish is
not older (``for_timestamp``) and skips older records as it reads.

Retention (``to_drop``) works by whole segments, as RabbitMQ's does, and never drops the
segment being written: the oldest go while the stream holds more than ``x-max-length-bytes``,
or while their newest message is older than ``x-max-age``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(slots=True)
class SegmentInfo:
    number: int  # the store segment (``msgs.N``)
    first_offset: int
    first_msg_id: int  # where its first record is in the store
    count: int = 0
    size: int = 0  # record bytes
    first_ms: int = 0  # publish time of its first and last message (epoch ms)
    last_ms: int = 0

    @property
    def end(self) -> int:
        """One past its last offset."""
        return self.first_offset + self.count


class SegmentIndex:
    """The segments of one stream, oldest first, and the next offset to assign."""

    def __init__(self, next_offset: int = 0) -> None:
        self.segments: list[SegmentInfo] = []
        self._starts: list[int] = []  # first_offset of each segment, for bisect
        self.next_offset = next_offset
        self.size = 0  # record bytes of every segment

    def __len__(self) -> int:
        return len(self.segments)

    @property
    def first_offset(self) -> int:
        """The oldest offset still held; ``next_offset`` when the stream is empty."""
        return self.segments[0].first_offset if self.segments else self.next_offset

    @property
    def count(self) -> int:
        return sum(segment.count for segment in self.segments)

    def add(
        self, number: int, msg_id: int, size: int, at_ms: int, offset: int | None = None
    ) -> int:
        """Note a record appended to store segment ``number``; returns its offset.

        ``offset`` (recovery) places it where the record says it was; an append takes the next.
        """
        if offset is None:
            offset = self.next_offset
        last = self.segments[-1] if self.segments else None
        if last is None or last.number != number or offset != last.end:
            last = SegmentInfo(number, offset, msg_id, first_ms=at_ms)
            self.segments.append(last)
            self._starts.append(offset)
        last.count += 1
        last.size += size
        last.last_ms = at_ms
        self.size += size
        self.next_offset = max(self.next_offset, offset + 1)
        return offset

    def locate(self, offset: int) -> SegmentInfo | None:
        """The segment holding ``offset``, or None (dropped, not written yet, or a gap)."""
        index = bisect.bisect_right(self._starts, offset) - 1
        if index < 0:
            return None
        segment = self.segments[index]
        return segment if offset < segment.end else None

    def following(self, offset: int) -> SegmentInfo | None:
        """The first segment starting at or after ``offset`` (past a gap recovery left)."""
        index = bisect.bisect_left(self._starts, offset)
        return self.segments[index] if index < len(self.segments) else None

    def for_timestamp(self, at_ms: int) -> SegmentInfo | None:
        """The first segment holding a message published at or after ``at_ms``."""
        for segment in self.segments:
            if segment.last_ms >= at_ms:
                return segment
        return None

    def to_drop(self, *, max_bytes: int | None, max_age_ms: int | None, now_ms: int) -> int:
        """How many of the oldest segments retention removes now (never the newest)."""
        drop = 0
        size = self.size
        while drop < len(self.segments) - 1:
            segment = self.segments[drop]
            too_big = max_bytes is not None and size > max_bytes
            too_old = max_age_ms is not None and segment.last_ms < now_ms - max_age_ms
            if not (too_big or too_old):
                break
            size -= segment.size
            drop += 1
        return drop

    def drop_first(self, count: int) -> list[SegmentInfo]:
        dropped = self.segments[:count]
        del self.segments[:count]
        del self._starts[:count]
        self.size -= sum(segment.size for segment in dropped)
        return dropped
