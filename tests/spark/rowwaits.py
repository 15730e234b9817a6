"""Waiting for a streaming query's rows by their progress, not by a total bound.

Why: a wait such as "30 rows within 60 s" counts the first batch's task launch, the Python
workers' start and every batch, which a loaded machine stretches, so it fails healthy runs that
are slow; what it means to catch is a query that stopped reading. Here a wait for a count
(``wait_rows``) or for an availableNow query's end (``wait_ended``, instead of
``awaitTermination(120)``) fails only when the row count has not moved for ``STALL_S``, naming
what it waited for and the last count. The spark marker's pytest timeout stays the outer guard.
(childruns.wait_progressing is the same idea for a child run, by its log and files.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

STALL_S = 60.0  # no new row for this long: the query stopped reading


class StalledError(AssertionError):
    """A wait for rows that saw no progress for its window, or whose query ended."""


def wait_rows(
    what: str,
    count: Callable[[], int],
    wanted: int,
    query: Any,
    *,
    stall_s: float = STALL_S,
    unit: str = "rows",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Waits until ``count()`` (of ``unit``: rows, or batches) reaches ``wanted``; fails when it
    shows no progress for ``stall_s``, or when ``query`` failed or is no longer active. Returns
    the count."""
    seen, since = count(), clock()
    while seen < wanted:
        failure = query.exception()
        if failure is not None:
            raise StalledError(f"{what}: the query failed at {seen} of {wanted} {unit}: {failure}")
        if not query.isActive:
            raise StalledError(f"{what}: the query stopped at {seen} of {wanted} {unit}")
        sleep(0.2)
        now = count()
        if now != seen:
            seen, since = now, clock()
        elif clock() - since >= stall_s:
            raise StalledError(
                f"{what}: no progress for {stall_s:.0f} s, stalled at {seen} of {wanted} {unit}"
            )
    return seen


def wait_ended(
    what: str,
    count: Callable[[], int],
    query: Any,
    *,
    stall_s: float = STALL_S,
    unit: str = "rows",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Waits until ``query`` is no longer active (an availableNow query that read what it was
    to read, or one that failed: the caller's ``awaitTermination()`` then raises its error);
    fails when ``count()`` shows no progress for ``stall_s`` while it runs. Returns the count."""
    seen, since = count(), clock()
    while query.isActive:
        sleep(0.2)
        now = count()
        if now != seen:
            seen, since = now, clock()
        elif clock() - since >= stall_s:
            raise StalledError(
                f"{what}: no progress for {stall_s:.0f} s, stalled at {seen} {unit}, "
                "the query still running"
            )
    return seen
