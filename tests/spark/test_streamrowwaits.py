"""rowwaits.wait_rows, in memory with a clock the test moves: it waits as long as rows keep
coming, and fails when they stop for its window, naming what stalled and the last count."""

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
