"""Bounded polling for time-based broker behaviour (TTL, queue expiry, alarms, policies).

Why: the suites must not depend on machine speed. A test states the condition it expects and a
generous upper bound; it returns as soon as the condition holds, and fails with the last observed
value when the bound passes. Nothing sleeps for a fixed long time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0


@overload
def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
) -> T: ...  # the default predicate, bool, never accepts None


@overload
def wait_for(
    probe: Callable[[], T],
    predicate: Callable[[T], bool],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
) -> T: ...


def wait_for(
    probe: Callable[[], T],
    predicate: Callable[[T], bool] = bool,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.02,
    what: str = "condition",
) -> T:
    """Call ``probe`` until ``predicate(value)`` holds; return that value.

    Fails with ``AssertionError`` (showing the last value) after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if predicate(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {value!r}")
        time.sleep(interval)


def sleep_until(deadline: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``deadline`` (bounded by construction)."""
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
