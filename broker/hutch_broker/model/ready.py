"""A queue's ready messages in delivery order: FIFO (Q-4), or by message priority.

Why a module of its own: a classic queue and a priority queue (``x-max-priority``) differ only in
which ready message is the head.  ``Queue`` asks for the head, pushes fresh and requeued entries
and never looks inside, so TTL, length limits, dead-lettering, paging and recovery work the same
for both.

Ordering rule (Q-4): a message can only be delivered from the head, so any requeued message has a
lower sequence number than every message that was never delivered.  One ``Level`` therefore holds
a heap of requeued entries (by original position), always served first, and a FIFO deque of fresh
ones: O(1) / O(log n) per message.

A priority queue is one ``Level`` per priority in use, highest first, as RabbitMQ 3.10.8 keeps
one backing queue per priority.  Levels exist only while they hold messages and the highest one
is cached, so a publish costs O(1) whatever the priority, and only emptying the top level looks
at the (at most 256) others.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator

from hutch_broker.model.messages import Entry
from hutch_broker.protocol import properties


class Level:
    """Ready messages of one priority: requeued ones (by position) before fresh ones (FIFO)."""

    __slots__ = ("fresh", "requeued")

    def __init__(self) -> None:
        self.fresh: deque[Entry] = deque()
        self.requeued: list[Entry] = []

    def __len__(self) -> int:
        return len(self.fresh) + len(self.requeued)

    def push_fresh(self, entry: Entry) -> None:
        self.fresh.append(entry)

    def appender(self) -> Callable[[Entry], None]:
        """``push_fresh`` as the deque's own append (``fresh`` is cleared, never replaced), for
        the queue's publish: a Python call less a queued message."""
        return self.fresh.append

    def push_requeued(self, entry: Entry) -> None:
        heapq.heappush(self.requeued, entry)

    def pop(self) -> Entry | None:
        if self.requeued:
            return heapq.heappop(self.requeued)
        return self.fresh.popleft() if self.fresh else None

    def peek(self) -> Entry | None:
        if self.requeued:
            return self.requeued[0]
        return self.fresh[0] if self.fresh else None

    def __iter__(self) -> Iterator[Entry]:
        yield from sorted(self.requeued)
        yield from self.fresh

    def fresh_entries(self) -> Iterator[Entry]:
        return iter(self.fresh)

    def requeued_entries(self) -> Iterator[Entry]:
        return iter(self.requeued)

    def fresh_count(self) -> int:
        return len(self.fresh)

    def clear(self) -> None:
        self.fresh.clear()
        self.requeued.clear()


class Prioritised:
    """Ready messages of a priority queue: the highest non-empty level is the head."""

    __slots__ = ("_count", "_fresh_count", "_levels", "_top", "max_priority")

    def __init__(self, max_priority: int) -> None:
        self.max_priority = max_priority
        self._levels: dict[int, Level] = {}
        self._top = -1  # highest level holding messages, -1 when empty
        self._count = 0
        self._fresh_count = 0

    def level_of(self, entry: Entry) -> int:
        """No priority is 0; one above the maximum counts as the maximum (as in RabbitMQ)."""
        return min(properties.priority(entry.message.raw_properties), self.max_priority)

    def __len__(self) -> int:
        return self._count

    def _level(self, entry: Entry) -> Level:
        number = self.level_of(entry)
        level = self._levels.get(number)
        if level is None:
            level = self._levels[number] = Level()
        self._top = max(self._top, number)
        self._count += 1
        return level

    def push_fresh(self, entry: Entry) -> None:
        self._level(entry).push_fresh(entry)
        self._fresh_count += 1

    def appender(self) -> Callable[[Entry], None]:
        return self.push_fresh

    def push_requeued(self, entry: Entry) -> None:
        self._level(entry).push_requeued(entry)

    def pop(self) -> Entry | None:
        if self._top < 0:
            return None
        level = self._levels[self._top]
        fresh = not level.requeued
        entry = level.pop()
        assert entry is not None  # noqa: S101 - levels are removed once empty
        self._count -= 1
        self._fresh_count -= fresh
        if not level:
            del self._levels[self._top]
            self._top = max(self._levels, default=-1)
        return entry

    def peek(self) -> Entry | None:
        return self._levels[self._top].peek() if self._top >= 0 else None

    def __iter__(self) -> Iterator[Entry]:
        for number in sorted(self._levels, reverse=True):
            yield from self._levels[number]

    def fresh_entries(self) -> Iterator[Entry]:
        for number in sorted(self._levels, reverse=True):
            yield from self._levels[number].fresh

    def requeued_entries(self) -> Iterator[Entry]:
        for level in self._levels.values():
            yield from level.requeued

    def fresh_count(self) -> int:
        return self._fresh_count

    def clear(self) -> None:
        self._levels.clear()
        self._top = -1
        self._count = self._fresh_count = 0


def for_arguments(max_priority: int | None) -> Level | Prioritised:
    """The ready set a queue declared with these arguments needs."""
    return Level() if max_priority is None else Prioritised(max_priority)
