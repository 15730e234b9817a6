"""One list call per (broker, kind, vhost) per sweep window, shared by every object's timer.

Why: 1,000 Queue timers asking the broker about their own queue would cost O(objects) requests
per period (MTO's reconcile storms). Here the first tick in a window lists, concurrent ticks wait
on the same lock, and later ticks reuse the result for ``min(60 s, period / 5)``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hutch_operator import brokerclient, config, metrics, translators

_entries: dict[tuple[str, str, str], tuple[float, list[dict[str, Any]]]] = {}
_locks: dict[tuple[str, str, str], asyncio.Lock] = {}


def ttl() -> float:
    return min(60.0, config.sync_period() / 5)


async def get(
    client: brokerclient.BrokerClient, broker_key: str, kind: str, request: translators.Request
) -> list[dict[str, Any]]:
    """The listed items (cached); ``request.path`` carries the vhost."""
    key = (broker_key, kind, request.path)
    lock = _locks.setdefault(key, asyncio.Lock())
    async with lock:
        entry = _entries.get(key)
        if entry is not None and entry[0] > time.monotonic():
            return entry[1]
        with metrics.SWEEP_LIST_SECONDS.labels(kind).time():
            items = await client.call(request)
        listed = [item for item in items or () if isinstance(item, dict)]
        _entries[key] = (time.monotonic() + ttl(), listed)
        return listed


def invalidate(broker_key: str) -> None:
    for key in [k for k in _entries if k[0] == broker_key]:
        del _entries[key]


def reset() -> None:
    """Forget everything (operator cleanup; a new event loop cannot reuse the locks)."""
    _entries.clear()
    _locks.clear()
