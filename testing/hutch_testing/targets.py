"""``deliver_from`` for the model tests' stand-in channels, from their own ``has_capacity``.

Why: a queue with one acking consumer hands its channel a run of deliveries in one call
(``DeliveryTarget.deliver_from``), where the dispatch layer's ``Channel`` does the run's
bookkeeping itself. A model test's channel is a few lines that say when a consumer has room and
record what it is given; this gives it the run as the one-at-a-time rule it stands for: ask
``has_capacity``, take the head, ``deliver`` it, again. The queue counts the run's deliveries
against the consumer only once the run is over, so while it runs they are counted here, and
the consumer's count is put back before the queue adds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class OneAtATime:
    """A mixin for a test's ``DeliveryTarget`` that has ``has_capacity`` and ``deliver``."""

    def has_capacity(self, consumer: Any) -> bool:
        raise NotImplementedError

    def deliver(self, consumer: Any, queue: Any, entry: Any) -> None:
        raise NotImplementedError

    def deliver_from(
        self, consumer: Any, queue: Any, pop: Callable[[], Any]
    ) -> tuple[int, int, int]:
        before = consumer.unacked
        count = sizes = redelivers = 0
        try:
            while self.has_capacity(consumer):
                entry = pop()
                if entry is None:
                    break
                consumer.unacked += 1
                count += 1
                sizes += entry.size
                redelivers += bool(entry.redelivered)
                self.deliver(consumer, queue, entry)
        finally:
            consumer.unacked = before
        return count, sizes, redelivers
