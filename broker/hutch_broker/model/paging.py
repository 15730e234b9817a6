"""Paging message bodies out of memory under memory pressure (issue 4, MEM).

A queue can hold far more than the memory watermark: while the pager is
active (memory use above ``memory.PAGING_RATIO`` of the watermark, like RabbitMQ's
``vm_memory_high_watermark_paging_ratio``), every queue keeps only its first
``KEEP_IN_MEMORY`` ready messages with bodies; the rest are written to a
paging store and replaced by a body-less stub.  Bodies come back one by one
as messages reach the head.  A persistent message in a durable queue is
already in the queue's own store, so paging it out costs no write at all.

Recovered messages start out the same way: a restart reads the stored records' index and
leaves every body in its queue's store (``Queue.restore``), so a broker restarts with any
amount of data its disk holds (docs/isolation/recovery.md).

A body that cannot be read back (a record damaged on disk since it was verified, an I/O
error) is not served: its entry leaves the queue with an ERROR line, and the record stays
in the store, unacked, so the next start-up verifies it again, and sets it aside in the
quarantine if it is damaged (``store.recovery``), or recovers it.

The paging store lives in ``<data_dir>/paging``, is never fsynced (its
contents are worthless after a restart) and is wiped at start-up.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from hutch_broker.store.errors import StoreError

if TYPE_CHECKING:
    from hutch_broker.model.storage import LogStore, QueueLog

log = logging.getLogger(__name__)

KEEP_IN_MEMORY: Final = 1024  # messages at the head of a queue that keep their bodies ...
KEEP_BYTES: Final = 4 * 1024 * 1024  # ... and no more than this many body bytes


class Pager:
    def __init__(self, store: LogStore | None = None) -> None:
        self.store = store
        self.active = False
        self._queues: dict[tuple[str, str], QueueLog] = {}

    @property
    def enabled(self) -> bool:
        return self.active and self.store is not None

    def queue_store(self, vhost: str, queue: str) -> QueueLog:
        key = (vhost, queue)
        found = self._queues.get(key)
        if found is None:
            assert self.store is not None  # noqa: S101 - callers check ``enabled``
            found = self._queues[key] = self.store.open_queue(vhost, queue)
        return found

    def forget(self, vhost: str, queue: str) -> None:
        """The queue is gone: drop its paged bodies."""
        if self._queues.pop((vhost, queue), None) is not None and self.store is not None:
            self.store.delete_queue(vhost, queue)

    def sync(self) -> None:
        """Lets the store retire fully read segments (it deletes them at a sync)."""
        if self.store is not None and self._queues:
            self.store.sync()


def read_body(store: QueueLog, msg_id: int, vhost: str, queue: str) -> bytes | None:
    """The stored body of ``msg_id``, or None (with an ERROR line) when it cannot be read."""
    try:
        return store.read(msg_id).body
    except (StoreError, OSError) as exc:
        log.error(
            "queue '%s' in vhost '%s': message %#x not delivered, its stored body cannot be "
            "read (%s); a durable record stays on disk and start-up checks it again",
            queue,
            vhost,
            msg_id,
            exc,
        )
        return None
