"""The fields of one message appended to a queue's store (``QueueStore.append``), for the tests
that append a message to see it written, synced or recovered, and care about nothing else of it.

Why shared: the store's stop and sync tests appended with the same record, each with its own
copy of it; one definition keeps them appending the same message.
"""

from __future__ import annotations

from typing import Any

FIELDS: dict[str, Any] = {
    "enqueued_at_ms": 1,
    "expire_at_ms": 0,
    "exchange": "",
    "routing_key": "k",
    "raw_properties": b"",
}
