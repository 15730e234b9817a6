"""One list call per (broker, kind, vhost) per sweep window, shared by every object's timer.

Why: 1,000 Queue timers asking the broker about their own queue would cost O(objects) requests
per period (MTO's reconcile storms). Here the first tick in a window lists, concurrent ticks wait
on the same lock, and later ticks reuse the result for ``ttl()``.

A listing is only as fresh as the operator's last write to that broker: every declare or delete
calls ``wrote()``, which drops the broker's listings and marks the time, so a listing that
started before the write (still in flight, or cached) is never used to judge what the operator
just wrote. Without that, a user's own change (a Policy edit, a new maxLength, a fresh Queue)
looked like drift to the next tick within the window: a false ``DriftCorrected`` and a second
write.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hutch_operator import brokerclient, config, metrics, translators

# key → (expires, started, items): ``started`` is when the list call was sent.
_entries: dict[tuple[str, str, str], tuple[float, float, list[dict[str, Any]]]] = {}
_locks: dict[tuple[str, str, str], asyncio.Lock] = {}
_written: dict[str, float] = {}  # broker key → monotonic time of the operator's last write


def ttl() -> float:
    return config.snapshot_ttl()


def usable(
    entry: tuple[float, float, list[dict[str, Any]]] | None, written: float, now: float
) -> bool:
    """An entry serves while unexpired and listed after the broker's last operator write."""
    return entry is not None and entry[0] > now and entry[1] > written


async def get(
    client: brokerclient.BrokerClient, broker_key: str, kind: str, request: translators.Request
) -> list[dict[str, Any]]:
    """The listed items (cached); ``request.path`` carries the vhost."""
    key = (broker_key, kind, request.path)
    lock = _locks.setdefault(key, asyncio.Lock())
    async with lock:
        entry = _entries.get(key)
        if entry is not None and usable(entry, _written.get(broker_key, -1.0), time.monotonic()):
            return entry[2]
        started = time.monotonic()
        with metrics.SWEEP_LIST_SECONDS.labels(kind).time():
            items = await client.call(request)
        listed = [item for item in items or () if isinstance(item, dict)]
        if started > _written.get(broker_key, -1.0):
            _entries[key] = (time.monotonic() + ttl(), started, listed)
        return listed


def wrote(broker_key: str) -> None:
    """The operator wrote (or may have written) to this broker: its listings are stale."""
    _written[broker_key] = time.monotonic()
    invalidate(broker_key)


def invalidate(broker_key: str) -> None:
    for key in [k for k in _entries if k[0] == broker_key]:
        del _entries[key]


def reset() -> None:
    """Forget everything (operator cleanup; a new event loop cannot reuse the locks)."""
    _entries.clear()
    _locks.clear()
    _written.clear()
