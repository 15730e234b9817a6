"""querywaits' waits (wait_count, wait_ended, wait_idle, drain), in memory with a clock the test
moves: they wait as long as their sign keeps moving, however slowly, and fail when it stops for
their window, naming what stalled and the last value; a failed query, or a stopped one that had
to keep running, fails at once."""

from pathlib import Path
from typing import Any

import pytest

from tests.spark import querywaits


class FakeQuery:
    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.isActive = True  # PySpark's names
        self.status: dict[str, Any] = {}
        self.lastProgress: dict[str, Any] | None = None

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


def wait(rows: Rows, wanted: int, query: FakeQuery, *, active: bool = True) -> None:
    querywaits.wait_count(
        "30 rows", lambda: rows.rows, wanted, query, "rows collected", active=active,
        stall_s=60, clock=rows.clock, sleep=rows.sleep,
    )  # fmt: skip


def test_a_slow_source_that_keeps_producing_is_waited_for() -> None:
    rows = Rows(per_poll=1, stop_at=30, step_s=50)  # a row every 50 s: 25 min in all
    wait(rows, 30, FakeQuery())
    assert rows.rows == 30 and rows.now >= 29 * 50


def test_a_source_that_stops_producing_fails_after_the_window() -> None:
    rows = Rows(per_poll=1, stop_at=12, step_s=1)
    with pytest.raises(AssertionError, match=r"^30 rows: stalled, no progress for 60 s "
                       r"\(rows collected: last seen 12\)$"):  # fmt: skip
        wait(rows, 30, FakeQuery())
    assert 12 + 60 <= rows.now <= 12 + 61


def test_a_failed_query_fails_at_once_and_a_stopped_one_when_it_had_to_run() -> None:
    query = FakeQuery()
    query.failure = RuntimeError("boom")
    with pytest.raises(pytest.fail.Exception, match="30 rows: the query failed: boom"):
        wait(Rows(per_poll=0, stop_at=0, step_s=1), 30, query)
    query = FakeQuery()
    query.isActive = False
    with pytest.raises(pytest.fail.Exception, match="30 rows: the query stopped before it"):
        wait(Rows(per_poll=0, stop_at=0, step_s=1), 30, query)
    # not held to keep running (a sink's count that lags the query's end): the window decides
    rows = Rows(per_poll=0, stop_at=0, step_s=1)
    with pytest.raises(AssertionError, match="stalled, no progress for 60 s"):
        wait(rows, 30, query, active=False)


class Ending(Rows):
    """A query that ends once its source has produced `stop_at` rows, or never (`ends`)."""

    def __init__(self, query: FakeQuery, stop_at: int, step_s: float, *, ends: bool) -> None:
        super().__init__(per_poll=1, stop_at=stop_at, step_s=step_s)
        self.query, self.ends = query, ends

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.ends and self.rows == self.stop_at:
            self.query.isActive = False


def wait_end(rows: Ending) -> None:
    querywaits.wait_ended(
        "availableNow", rows.query, lambda: rows.rows, "rows collected", stall_s=60,
        clock=rows.clock, sleep=rows.sleep,
    )  # fmt: skip


def test_wait_ended_waits_for_a_slow_query_to_end() -> None:
    rows = Ending(FakeQuery(), stop_at=30, step_s=50, ends=True)
    wait_end(rows)
    assert rows.rows == 30 and not rows.query.isActive


def test_wait_ended_fails_when_a_running_query_stops_producing() -> None:
    rows = Ending(FakeQuery(), stop_at=12, step_s=1, ends=False)
    with pytest.raises(AssertionError, match=r"^availableNow: stalled, no progress for 60 s "
                       r"\(rows collected: last seen 12\)$"):  # fmt: skip
        wait_end(rows)


class Trigger:
    """A query's status as it goes through a trigger's steps, one step a poll, then idles (or
    never, when it is stuck at step `stuck`); the clock moves `step_s` a poll."""

    STEPS = ("Getting offsets from HutchStream", "Processing new data", "Committing")

    def __init__(self, query: FakeQuery, steps: int, step_s: float, stuck: int | None = None):
        self.query, self.steps, self.step_s, self.stuck = query, steps, step_s, stuck
        self.step, self.now = 0, 0.0  # no batch reported yet: lastProgress stays None
        self.show()

    def show(self) -> None:
        active = self.step < self.steps
        message = self.STEPS[self.step % 3] if active else "Waiting for next trigger"
        self.query.status = {
            "message": message, "isTriggerActive": active, "isDataAvailable": active,
        }  # fmt: skip

    def clock(self) -> float:
        return self.now

    def sleep(self, _seconds: float) -> None:
        self.now += self.step_s
        if self.step != self.stuck:
            self.step += 1
        self.show()


def wait_idle(trigger: Trigger) -> None:
    querywaits.wait_idle(
        "an idle trigger", trigger.query, stall_s=60, clock=trigger.clock, sleep=trigger.sleep
    )


def test_wait_idle_waits_while_the_trigger_goes_through_its_steps() -> None:
    trigger = Trigger(FakeQuery(), steps=40, step_s=50)  # a step every 50 s: over half an hour
    wait_idle(trigger)
    assert trigger.query.status["isTriggerActive"] is False and trigger.now == 40 * 50


def test_wait_idle_fails_on_a_trigger_stuck_in_a_step_and_at_once_on_a_stopped_query() -> None:
    trigger = Trigger(FakeQuery(), steps=40, step_s=1, stuck=4)
    with pytest.raises(AssertionError, match=r"^an idle trigger: stalled, no progress for 60 s "
                       r"\(the query's status and last progress: last seen "
                       r"\('Processing new data', True, True, None, None\)\)$"):  # fmt: skip
        wait_idle(trigger)
    assert 4 + 60 <= trigger.now <= 4 + 61
    stopped = Trigger(FakeQuery(), steps=40, step_s=1)
    stopped.query.isActive = False
    with pytest.raises(pytest.fail.Exception, match="an idle trigger: the query stopped before"):
        wait_idle(stopped)
    assert stopped.now == 0


class Run(FakeQuery):
    """An availableNow run writing its checkpoint: a file a poll (offsets, then commits) until
    `batches` are committed, then it ends (with `failure`, if any); or it stops writing after
    `stalls_at` files. The clock moves `step_s` a poll."""

    def __init__(self, checkpoint: Path, batches: int, step_s: float, *,
                 failure: Exception | None = None, stalls_at: int | None = None) -> None:  # fmt: skip
        super().__init__()
        self.checkpoint, self.batches, self.step_s = checkpoint, batches, step_s
        self.ending_failure, self.stalls_at = failure, stalls_at
        self.written, self.now, self.awaited = 0, 0.0, 0
        for name in ("offsets", "commits"):
            (checkpoint / name).mkdir(parents=True)

    def clock(self) -> float:
        return self.now

    def sleep(self, _seconds: float) -> None:
        self.now += self.step_s
        if self.written == self.stalls_at or not self.isActive:
            return
        batch, kind = divmod(self.written, 2)
        (self.checkpoint / ("commits" if kind else "offsets") / str(batch)).write_text("")
        self.written += 1
        if self.written == 2 * self.batches:
            self.isActive, self.failure = False, self.ending_failure

    def awaitTermination(self) -> None:  # noqa: N802 - PySpark's name
        """Counted; PySpark's raises a failed query's exception, this one returns it to the
        check after it."""
        assert not self.isActive, "awaited before the run ended: it would block"
        self.awaited += 1


def drain(run: Run) -> None:
    querywaits.drain("the drain", run, run.checkpoint, stall_s=60, clock=run.clock, sleep=run.sleep)


def test_drain_waits_for_a_slow_run_to_end_and_awaits_it(tmp_path: Path) -> None:
    run = Run(tmp_path / "checkpoint", batches=12, step_s=50)  # a step every 50 s: 20 min
    drain(run)
    assert (run.written, run.awaited) == (24, 1)
    assert querywaits.checkpoint_steps(run.checkpoint) == 24


def test_drain_fails_on_a_run_that_stopped_committing_or_ended_failed(tmp_path: Path) -> None:
    run = Run(tmp_path / "stalled", batches=12, step_s=1, stalls_at=7)
    with pytest.raises(AssertionError, match=r"^the drain: stalled, no progress for 60 s "
                       r"\(batches started and committed: last seen 7\)$"):  # fmt: skip
        drain(run)
    assert run.awaited == 0
    failed = Run(tmp_path / "failed", batches=3, step_s=1, failure=RuntimeError("boom"))
    with pytest.raises(pytest.fail.Exception, match=r"^the drain: the query failed: boom$"):
        drain(failed)
    assert failed.awaited == 1
