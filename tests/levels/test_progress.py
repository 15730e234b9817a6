"""hutch_testing.progress: a wait fails on a stall of its sign, never on its total time.

Why: the tests that use it (the Spark source and sink, the store's kill test, the definitions
compaction) each check by hand that a broken run still fails; these pin the rule itself, on a
fake clock, in no time.
"""

from __future__ import annotations

import pytest
from hutch_testing.progress import Watch, wait_until


class Clock:
    """A clock that moves only when the wait sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_sign_that_keeps_moving_outlasts_any_total_time() -> None:
    clock, rows = Clock(), [0]

    def reached() -> bool:
        rows[0] += 1  # a row every 50 s: slow, never stalled
        return rows[0] >= 100

    watch = Watch("100 rows", "rows", lambda: rows[0], stall_s=60, clock=clock)
    assert wait_until(reached, watch, poll_s=50, sleep=clock.sleep)
    assert clock.now >= 99 * 50  # far beyond any bound a total wait would have had


def test_a_stalled_sign_fails_naming_it_and_its_last_value() -> None:
    clock, rows = Clock(), [0]

    def reached() -> bool:
        rows[0] = min(rows[0] + 10, 100)  # stops at 100 of 300
        return rows[0] >= 300

    watch = Watch("300 rows", "rows collected", lambda: rows[0], stall_s=60, clock=clock)
    with pytest.raises(AssertionError) as caught:
        wait_until(reached, watch, poll_s=1, sleep=clock.sleep)
    assert str(caught.value) == (
        "300 rows: stalled, no progress for 60 s (rows collected: last seen 100)"
    )
    assert 60 <= clock.now <= 60 + 10 + 1  # failed one window after the last change


def test_also_fails_at_once_and_a_reached_condition_returns_its_value() -> None:
    clock = Clock()
    watch = Watch("x", "nothing", lambda: 0, stall_s=60, clock=clock)
    assert wait_until(lambda: "there", watch, sleep=clock.sleep) == "there"

    def failed() -> None:
        raise AssertionError("the query failed")

    with pytest.raises(AssertionError, match="the query failed"):
        wait_until(lambda: False, watch, also=failed, sleep=clock.sleep)
    assert clock.now == 0
