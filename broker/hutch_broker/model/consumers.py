"""Which consumer of a queue gets the next message: priorities, round-robin, single active.

Why a module of its own: RabbitMQ has three rules here, and they compose.

- Consumer priorities (``x-priority`` on basic.consume, default 0): the highest-priority consumers
  with prefetch room get messages; equal priorities take turns; a lower priority gets a message
  only while every higher one is blocked.
- Round-robin within one priority, as before.
- Single active consumer (queue argument ``x-single-active-consumer``): only the active consumer
  gets messages.  The first consumer becomes active; when it leaves, the next active one is the
  highest-priority consumer, earliest registered first (RabbitMQ 3.10.8's classic queues, seen side
  by side).  A newcomer never takes over from a live active consumer.

Cost: consumers sit in one deque per priority in use, the priorities kept sorted; registration
order is an insertion-ordered dict.  Round-robin rotates full consumers to the back of their
deque; across priorities a cursor remembers the highest priority that may still have room, so
filling thousands of consumers of distinct priorities is linear, not quadratic.  Room only ever
appears through an ack, a qos or flow change or a writable socket, and each of those drains the
queue, which calls ``rescan`` first. So a cursor at -1 says that no consumer has gained room
since a scan found them all full: the publish path (``publishes.enqueue``) reads it and does
not scan again for each message queued behind a full consumer.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any, Protocol, TypeVar


class _Room(Protocol):
    """A consumer's channel (``queues.DeliveryTarget``), asked whether it can take more."""

    def has_capacity(self, consumer: Any) -> bool: ...


class Candidate(Protocol):
    """What the choice reads of a consumer (a ``queues.Consumer``); a protocol, as the queue
    holding the consumers imports this module (the model's modules import without cycles)."""

    @property
    def priority(self) -> int: ...

    @property
    def channel(self) -> _Room: ...


# Generic, so the queue gets its own ``queues.Consumer`` back from ``next_with_room``.
Consumer = TypeVar("Consumer", bound=Candidate)


class Consumers(dict[Consumer, None]):
    """A queue's consumers, in registration order for listings, by priority for delivery.

    The registration order is the dict itself (consumers are its keys), so ``len``, truth and
    iteration, which the publish path asks for on every message, stay C-level calls.
    """

    __slots__ = ("_by_priority", "_priorities", "active", "cursor", "single_active")

    def __init__(self, *, single_active: bool = False) -> None:
        super().__init__()
        self.single_active = single_active
        self.active: Consumer | None = None  # the single active consumer, when single_active
        self._by_priority: dict[int, deque[Consumer]] = {}
        self._priorities: list[int] = []  # ascending; delivery walks it from the end
        # Index into _priorities of the highest one that may have room; -1 once every one was
        # found full, until ``rescan`` (read by ``publishes.enqueue``: nothing to drain then).
        self.cursor = -1

    def add(self, consumer: Consumer) -> None:
        self[consumer] = None
        ring = self._by_priority.get(consumer.priority)
        if ring is None:
            ring = self._by_priority[consumer.priority] = deque()
            bisect.insort(self._priorities, consumer.priority)
        ring.append(consumer)
        self.rescan()
        if self.single_active and self.active is None:
            self.active = consumer

    def remove(self, consumer: Consumer) -> bool:
        """Forget ``consumer``; True when another consumer became the single active one."""
        if consumer not in self:
            return False
        del self[consumer]
        ring = self._by_priority[consumer.priority]
        ring.remove(consumer)
        if not ring:
            del self._by_priority[consumer.priority]
            self._priorities.pop(bisect.bisect_left(self._priorities, consumer.priority))
        self.rescan()
        if consumer is not self.active:
            return False
        self.active = self._successor()
        return self.active is not None

    def _successor(self) -> Consumer | None:
        """The highest priority, earliest registered consumer (only when the active one left)."""
        if not self._priorities:
            return None
        top = self._priorities[-1]
        return next(consumer for consumer in self if consumer.priority == top)

    def is_active(self, consumer: Consumer) -> bool:
        return not self.single_active or consumer is self.active

    def rescan(self) -> None:
        """Room may have appeared anywhere: the next choice starts at the highest priority."""
        self.cursor = len(self._priorities) - 1

    def next_with_room(self) -> Consumer | None:
        """The consumer for the next message, or None when every eligible one is blocked."""
        if self.single_active:
            active = self.active
            if active is not None and active.channel.has_capacity(active):
                return active
            return None
        while self.cursor >= 0:
            ring = self._by_priority[self._priorities[self.cursor]]
            for _ in range(len(ring)):
                consumer = ring[0]
                ring.rotate(-1)
                if consumer.channel.has_capacity(consumer):
                    return consumer
            self.cursor -= 1  # all full at this priority until the next rescan
        return None
