"""Publisher flow control: a publisher may not run far ahead of live consumers.

The broker is one thread, so publishing and delivering share the same CPU,
and on a small machine so do the clients.  Without a brake a fast publisher
fills a queue faster than its consumers drain it and consumption collapses
(RabbitMQ has the same problem and solves it with credit flow).  The rule
here: when a publish leaves a queue that has consumers with more than
``HIGH_WATER`` ready messages, the publishing connection stops being read
until the backlog is back under ``LOW_WATER``.  A queue whose consumers make
no progress for ``STALL_MS`` releases its publishers, so a stuck or absent
consumer never stops publishing (queues may still grow: that is what
queues are for).

A released stall is remembered: until that queue delivers again, publishes to
it do not throttle anyone. Without that memory a consumer that stopped reading
its socket cut its queue's publishers to a few messages every ``STALL_MS``
(163 msg/s was measured) for as long as it stayed connected; only the
resource alarms may hold publishers indefinitely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from hutch_broker.model.queues import Queue

HIGH_WATER: Final = 4096
LOW_WATER: Final = 1024
STALL_MS: Final = 200


class Publisher(Protocol):
    """A connection flow control can hold back: a dispatch ``Session``.

    Declared here so that flow control sits below the sessions it throttles.
    """

    @property
    def closed(self) -> bool: ...

    def release(self) -> None:
        """Its queues caught up: read and process its input again."""


@dataclass(slots=True)
class Mark:
    """One queue a throttled publisher waits on, with the consumers' progress."""

    queue: Queue
    delivered: int
    since_ms: int

    def caught_up(self) -> bool:
        queue = self.queue
        return queue.deleted or not queue.consumers or queue.ready_count <= LOW_WATER

    def stalled(self, now_ms: int) -> bool:
        """No delivery from the queue for ``STALL_MS``."""
        if self.queue.stats_deliver != self.delivered:
            self.delivered, self.since_ms = self.queue.stats_deliver, now_ms
            return False
        return now_ms - self.since_ms >= STALL_MS


class FlowControl:
    """The throttled publishers of one broker process."""

    def __init__(self) -> None:
        self.waiting: dict[Publisher, list[Mark]] = {}
        # Queues whose consumers stalled, with their delivery count at the time.
        self.stalled: dict[Queue, int] = {}

    def under_pressure(self, queue: Queue) -> bool:
        """Checked after a publish: should the publisher pause?"""
        if queue.ready_count <= HIGH_WATER or not queue.consumers:
            return False
        stalled_at = self.stalled.get(queue)
        if stalled_at is None:
            return True
        if stalled_at == queue.stats_deliver and not queue.deleted:
            return False  # still stuck: throttling would only slow the publisher down
        del self.stalled[queue]  # it delivers again: the brake applies again
        return True

    def throttle(self, session: Publisher, queues: list[Queue], now_ms: int) -> None:
        if len(self.stalled) > 64:  # forget deleted queues (bounded memory)
            self.stalled = {queue: n for queue, n in self.stalled.items() if not queue.deleted}
        marks = [Mark(queue, queue.stats_deliver, now_ms) for queue in queues]
        self.waiting.setdefault(session, []).extend(marks)

    def release_ready(self, now_ms: int) -> list[Publisher]:
        """Sessions whose every mark is released; they are forgotten here."""
        ready = []
        for session, marks in list(self.waiting.items()):
            if session.closed or all(self._released(mark, now_ms) for mark in marks):
                del self.waiting[session]
                ready.append(session)
        return ready

    def _released(self, mark: Mark, now_ms: int) -> bool:
        if mark.caught_up():
            return True
        if not mark.stalled(now_ms):
            return False
        self.stalled[mark.queue] = mark.queue.stats_deliver
        return True
