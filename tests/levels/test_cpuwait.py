"""hutch_testing.cpuwait on fake /proc files: a span less the two threads' CPU waits.

The serial pass's timing tests (test_routing_isolation, test_matching_cost) hold their canaries
to this figure; here the arithmetic, with the clock and the waits set by hand.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hutch_testing import cpuwait


def schedstat(path: Path, wait_ns: int) -> None:
    path.write_text(f"123456 {wait_ns} 7\n")  # run time, run-queue wait, time slices


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(cpuwait.time, "perf_counter", lambda: now[0])
    return now


def test_a_span_loses_both_threads_waits_and_keeps_the_rest(tmp_path, clock):
    own, broker = tmp_path / "own", tmp_path / "broker"
    schedstat(own, 1_000_000)
    schedstat(broker, 5_000_000)
    stopwatch = cpuwait.Stopwatch(None)
    stopwatch.paths = [own, broker]
    stopwatch.start()
    clock[0] += 0.300
    schedstat(own, 1_000_000 + 40_000_000)  # 40 ms this thread waited for a CPU
    schedstat(broker, 5_000_000 + 60_000_000)  # 60 ms the broker's loop did
    wall, less_waits = stopwatch.stop()
    assert wall == pytest.approx(0.300)
    assert less_waits == pytest.approx(0.200)  # what the broker took: a stall shows in full


def test_waits_longer_than_the_span_count_as_none_not_negative(tmp_path, clock):
    own = tmp_path / "own"
    schedstat(own, 0)
    stopwatch = cpuwait.Stopwatch(None)
    stopwatch.paths = [own]
    stopwatch.start()
    clock[0] += 0.010
    schedstat(own, 50_000_000)  # the two threads' waits overlap: their sum can pass the span
    assert stopwatch.stop() == (pytest.approx(0.010), 0.0)


def test_without_schedstats_the_figure_is_the_wall_clock(clock):
    stopwatch = cpuwait.Stopwatch(2**22 + 12345)  # above pid_max: no such /proc entry
    assert stopwatch.paths == []
    stopwatch.start()
    clock[0] += 0.5
    assert stopwatch.stop() == (pytest.approx(0.5), pytest.approx(0.5))


def test_the_loop_pid_is_hutch_brokers_own_and_a_shared_vhosts_process():
    hutch = SimpleNamespace(kind="hutch", pid=4242)
    assert cpuwait.loop_pid(hutch) == 4242
    assert cpuwait.loop_pid(SimpleNamespace(process=hutch, name="vhost-1")) == 4242
    assert cpuwait.loop_pid(SimpleNamespace(kind="rabbitmq", pid=4243)) is None
    assert cpuwait.loop_pid(SimpleNamespace(kind="hutch", pid=None)) is None


def test_this_threads_wait_is_read_from_the_kernel():
    assert cpuwait.run_queue_wait_ns(cpuwait.OWN_THREAD) >= 0
