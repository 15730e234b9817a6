"""rowwaits.wait_rows and wait_ended, in memory with a clock the test moves: they wait as long
as rows keep coming, and fail when they stop for their window, naming what stalled and the last
count."""

from typing import Any

import pytest

from tests.spark import rowwaits


class FakeQuery:
    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.isActive = True  # PySpark's name

    def exception(self) -> Any:
        return self.failure


class Rows:
    """A source that produces `per_poll` rows each poll until it has `stop_at`; the clock moves
    `step_s` a poll."""

    def __init__(self, per_poll: int, stop_at: int, step_s: float) -> None:
        self.rows, self.per_poll, self.stop_at, self.step_s = 0, per_poll, stop_at, step_s
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, _seconds: float) -> None:
        self.now += self.step_s
        self.rows = min(self.rows + self.per_poll, self.stop_at)


def wait(rows: Rows, wanted: int, query: FakeQuery) -> int:
    return rowwaits.wait_rows(
        "30 rows", lambda: rows.rows, wanted, query, stall_s=60, clock=rows.clock,
        sleep=rows.sleep,
    )  # fmt: skip


def test_a_slow_source_that_keeps_producing_is_waited_for() -> None:
    rows = Rows(per_poll=1, stop_at=30, step_s=50)  # a row every 50 s: 25 min in all
    assert wait(rows, 30, FakeQuery()) == 30


def test_a_source_that_stops_producing_fails_after_the_window() -> None:
    rows = Rows(per_poll=1, stop_at=12, step_s=1)
    with pytest.raises(rowwaits.StalledError, match=r"^30 rows: no progress for 60 s, stalled "
                       r"at 12 of 30 rows$"):  # fmt: skip
        wait(rows, 30, FakeQuery())
    assert 12 + 60 <= rows.now <= 12 + 61


def test_a_failed_or_stopped_query_fails_at_once() -> None:
    query = FakeQuery()
    query.failure = RuntimeError("boom")
    with pytest.raises(rowwaits.StalledError, match="failed at 0 of 30 rows: boom"):
        wait(Rows(per_poll=0, stop_at=0, step_s=1), 30, query)
    query = FakeQuery()
    query.isActive = False
    with pytest.raises(rowwaits.StalledError, match="stopped at 0 of 30 rows"):
        wait(Rows(per_poll=0, stop_at=0, step_s=1), 30, query)


class Ending(Rows):
    """A query that ends once its source has produced `stop_at` rows, or never (`ends`)."""

    def __init__(self, query: FakeQuery, stop_at: int, step_s: float, *, ends: bool) -> None:
        super().__init__(per_poll=1, stop_at=stop_at, step_s=step_s)
        self.query, self.ends = query, ends

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.ends and self.rows == self.stop_at:
            self.query.isActive = False


def wait_end(rows: Ending) -> int:
    return rowwaits.wait_ended(
        "availableNow", lambda: rows.rows, rows.query, stall_s=60, clock=rows.clock,
        sleep=rows.sleep,
    )  # fmt: skip


def test_wait_ended_waits_for_a_slow_query_to_end() -> None:
    rows = Ending(FakeQuery(), stop_at=30, step_s=50, ends=True)
    assert wait_end(rows) == 30


def test_wait_ended_fails_when_a_running_query_stops_producing() -> None:
    rows = Ending(FakeQuery(), stop_at=12, step_s=1, ends=False)
    with pytest.raises(
        rowwaits.StalledError,
        match=r"^availableNow: no progress for 60 s, stalled at 12 rows, the query still running$",
    ):
        wait_end(rows)
