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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from hutch_broker.model.queues import Queue

if TYPE_CHECKING:
    from hutch_broker.dispatch.sessions import Session

HIGH_WATER: Final = 4096
LOW_WATER: Final = 1024
STALL_MS: Final = 200


def under_pressure(queue: Queue) -> bool:
    """Checked after a publish: should the publisher pause?"""
    return queue.ready_count > HIGH_WATER and bool(queue.consumers)


@dataclass(slots=True)
class Mark:
    """One queue a throttled publisher waits on, with the consumers' progress."""

    queue: Queue
    delivered: int
    since_ms: int

    def released(self, now_ms: int) -> bool:
        queue = self.queue
        if queue.deleted or not queue.consumers or queue.ready_count <= LOW_WATER:
            return True
        if queue.stats_deliver != self.delivered:
            self.delivered, self.since_ms = queue.stats_deliver, now_ms
            return False
        return now_ms - self.since_ms >= STALL_MS


class FlowControl:
    """The throttled publishers of one broker process."""

    def __init__(self) -> None:
        self.waiting: dict[Session, list[Mark]] = {}

    def throttle(self, session: Session, queues: list[Queue], now_ms: int) -> None:
        marks = [Mark(queue, queue.stats_deliver, now_ms) for queue in queues]
        self.waiting.setdefault(session, []).extend(marks)

    def release_ready(self, now_ms: int) -> list[Session]:
        """Sessions whose every mark is released; they are forgotten here."""
        ready = []
        for session, marks in list(self.waiting.items()):
            if session.closed or all(mark.released(now_ms) for mark in marks):
                del self.waiting[session]
                ready.append(session)
        return ready
