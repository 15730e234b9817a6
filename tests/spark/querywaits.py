"""An in-process streaming query waited on by its progress (hutch_testing.progress).

Why: the source, sink and several-queues tests waited for a count with a total bound ("300
republished within 60 s", "every message within 60 s"), which counts every trigger of a query
that a loaded machine slows down. What they guard against is a query that stopped getting on,
so these waits fail only when their count has not grown for ``STALL_S`` (or at once when the
query failed). The stream source tests use them too, for rows or batches of a query that must
keep running (``active``) and for an availableNow query's end instead of
``awaitTermination(120)``; ``drain`` is that end for a run that must succeed, checked as every
such test checked it. A state that is no count (a trigger gone idle, a batch's commit) is
waited for by ``wait_state`` on another sign of progress: the query's status and last progress
(``wait_idle``), the checkpoint's files. The kill tests' child runs have their own waits
(childruns.py), on a child's log and files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from hutch_testing.progress import Watch, wait_until

STALL_S = 60.0


def _failed(query: Any, what: str, *, active: bool = False) -> Callable[[], None]:
    def check() -> None:
        if query.exception() is not None:
            pytest.fail(f"{what}: the query failed: {query.exception()}")
        if active and not query.isActive:
            pytest.fail(f"{what}: the query stopped before it")

    return check


def wait_count(
    what: str,
    count: Callable[[], int],
    target: int,
    query: Any,
    sign: str,
    *,
    active: bool = False,
    stall_s: float = STALL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Waits until ``count()`` reaches ``target``; fails when it has not changed for
    ``stall_s`` (``sign`` names it in the message, with its last value) or when the query
    failed, and with ``active`` when the query stopped (one that must keep running: its count
    cannot grow any more)."""
    wait_state(
        what, lambda: count() >= target, query, sign, count, active=active, stall_s=stall_s,
        clock=clock, sleep=sleep,
    )  # fmt: skip


def wait_state(
    what: str,
    reached: Callable[[], object],
    query: Any,
    sign: str,
    sample: Callable[[], object],
    *,
    active: bool = False,
    stall_s: float = STALL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Waits until ``reached()`` for a state that is no count (a trigger gone idle, a batch's
    commit file); fails when ``sample()``, the sign named ``sign``, has not changed for
    ``stall_s``, or as ``wait_count`` when the query failed or (``active``) stopped."""
    watch = Watch(what, sign, sample, stall_s, clock)
    wait_until(reached, watch, also=_failed(query, what, active=active), sleep=sleep)


_STATUS_SIGN = "the query's status and last progress"


def _status_sign(query: Any) -> tuple[object, ...]:
    """What a running query shows of its steps: its status (the step of the trigger it is in,
    "Getting offsets from ...", "Waiting for next trigger") and its last progress report's
    batch and time. A trigger stuck in one step changes none of them."""
    status = query.status
    progress = query.lastProgress or {}
    return (
        status["message"], status["isTriggerActive"], status["isDataAvailable"],
        progress.get("batchId"), progress.get("timestamp"),
    )  # fmt: skip


def wait_idle(
    what: str,
    query: Any,
    *,
    stall_s: float = STALL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Waits until a running query is between triggers (``isTriggerActive`` false); fails when
    its status and last progress have not changed for ``stall_s`` (a trigger that never
    ends), or at once when it failed or stopped."""
    wait_state(
        what, lambda: query.status["isTriggerActive"] is False, query, _STATUS_SIGN,
        lambda: _status_sign(query), active=True, stall_s=stall_s, clock=clock, sleep=sleep,
    )  # fmt: skip


def wait_every(
    what: str, expected: set[Any], collected: Callable[[], Iterable[Any]], query: Any
) -> None:
    """Waits until every item of ``expected`` is among ``collected()``; fails when the number
    of them there has not changed for STALL_S or when the query failed."""

    def found() -> int:
        return len(expected & set(collected()))

    wait_count(what, found, len(expected), query, f"of {len(expected)} expected, collected")


def wait_ended(
    what: str,
    query: Any,
    count: Callable[[], int],
    sign: str,
    *,
    stall_s: float = STALL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Waits until ``query`` is no longer active (it failed or finished); fails when
    ``count()`` has not changed for ``stall_s`` before. ``query.awaitTermination()`` then
    returns or raises its failure at once."""
    watch = Watch(what, sign, count, stall_s, clock)
    wait_until(lambda: not query.isActive, watch, sleep=sleep)


def checkpoint_steps(checkpoint: Path) -> int:
    """A query's steps as its checkpoint records them: one file in ``offsets`` as each batch
    starts, one in ``commits`` as it ends (the sign for a query whose sink collects nothing)."""
    return sum(len(list((checkpoint / name).glob("[0-9]*"))) for name in ("offsets", "commits"))


STEPS = "batches started and committed"


def drain(
    what: str,
    query: Any,
    checkpoint: Path,
    *,
    stall_s: float = STALL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """The end of an availableNow run that must succeed: waits for it as ``wait_ended`` with
    its checkpoint's steps as the sign, then ``awaitTermination()`` (at once now: it returns,
    or raises the query's failure) and fails when the query ended with an exception."""
    wait_ended(
        what, query, lambda: checkpoint_steps(checkpoint), STEPS, stall_s=stall_s, clock=clock,
        sleep=sleep,
    )  # fmt: skip
    query.awaitTermination()
    if query.exception() is not None:
        pytest.fail(f"{what}: the query failed: {query.exception()}")
