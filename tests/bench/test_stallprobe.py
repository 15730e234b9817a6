"""bench/stallprobe.py's counting: what a loop stall is, in CPU, and where it is filed.

Why: the latency tail's causes (#32) are read off these counts, so a callback that took 5 ms of
CPU must land in the 1, 2 and 5 ms columns and not in the 10 ms one, be kept with its time when
it is 2 ms or more, survive the wrapped function raising, and a gc pass must be filed under its
generation. In memory: a fake clock, and CPU burnt on purpose.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import stallprobe  # noqa: E402


def burn(seconds: float) -> None:
    began = time.thread_time()
    while time.thread_time() - began < seconds:
        pass


def test_a_stall_counts_in_every_threshold_it_reaches() -> None:
    now = [100.0]
    stalls = stallprobe.Stalls(clock=lambda: now[0])
    now[0] = 103.5
    stalls.add("read", 0.005)
    stalls.add("read", 0.0004)
    stalls.add("gc2", 0.025)
    read = stalls.snapshot()["names"]["read"]
    assert read["count"] == 2
    assert read["over_ms"] == {"1": 1, "2": 1, "5": 1, "10": 0, "20": 0}
    assert read["max_ms"] == pytest.approx(5.0)
    assert read["cpu_ms"] == pytest.approx(5.4)
    # Only the two of 2 ms or more are kept as events, with the time since the reset.
    assert stalls.snapshot()["events"] == [(3.5, "read", 5.0), (3.5, "gc2", 25.0)]


def test_a_reset_starts_the_window_again() -> None:
    now = [0.0]
    stalls = stallprobe.Stalls(clock=lambda: now[0])
    stalls.add("turn", 0.003)
    now[0] = 7.0
    stalls.reset()
    now[0] = 9.0
    assert stalls.snapshot() == {"seconds": 2.0, "names": {}, "events": []}


def test_timed_adds_the_cpu_of_the_call_even_when_it_raises() -> None:
    stalls = stallprobe.Stalls()

    def work(seconds: float) -> str:
        burn(seconds)
        if seconds > 0.005:
            raise ValueError("late")
        return "done"

    wrapped = stallprobe.timed(stalls, "end_of_tick", work)
    assert wrapped(0.003) == "done"
    with pytest.raises(ValueError, match="late"):
        wrapped(0.006)
    entry = stalls.snapshot()["names"]["end_of_tick"]
    assert entry["count"] == 2
    assert entry["over_ms"]["5"] == 1
    assert entry["over_ms"]["2"] == 2
    assert entry["cpu_ms"] >= 9.0


def test_a_gc_pass_is_filed_under_its_generation() -> None:
    stalls = stallprobe.Stalls()
    timer = stallprobe.GcTimer(stalls)
    gc.callbacks.append(timer)
    try:
        gc.collect(1)
    finally:
        gc.callbacks.remove(timer)
    names = stalls.snapshot()["names"]
    assert names["gc1"]["count"] == 1
    assert "gc2" not in names


def test_the_reports_own_cpu_is_taken_once() -> None:
    stalls = stallprobe.Stalls()
    stalls.own += 0.004
    assert stalls.take_own() == pytest.approx(0.004)
    assert stalls.take_own() == 0.0
