"""The noisy-neighbour harness can fail: a quiet canary is fast, a frozen broker is seen.

A harness that always passes proves nothing, so the canary is checked against both sides:
on a quiet hutch-broker its round trips stay far below the suite's bound, and when the broker
process is stopped (SIGSTOP) for 600 ms the canary reports a round trip of at least 500 ms
(the message sent right after the stop waits it out, less at most one 20 ms interval).

Given the broker's pid, the canary also takes out of each round trip the time the broker's loop
thread and its own thread waited for a CPU: a stopped broker is not waiting for a CPU, so the
stop still shows in full in that share, and under a busy neighbour on the same cores the share
stays small while the wall clock grows.
"""

import signal
import threading
import time

import pytest
from hutch_testing import cpuwait, noisy


def test_a_canary_on_a_quiet_broker_has_small_round_trips(quiet_broker, tmp_path):
    tenant = noisy.create_tenant(quiet_broker, "canary")
    pid = cpuwait.loop_pid(quiet_broker)
    assert pid == quiet_broker.pid
    with noisy.Canary(quiet_broker, tenant, work_dir=tmp_path, broker_pid=pid) as canary:
        time.sleep(2.0)
        report = canary.stop()
    assert report.count >= 50, report.summary()  # 2 s at one per 20 ms, on a busy machine
    assert report.violations() == [], report.summary()
    assert report.delivered == report.count
    assert report.broker_max_ms is not None and report.broker_max_ms <= report.max_ms


@pytest.mark.parametrize("measured", [False, True], ids=["wall-clock", "broker-share"])
def test_a_stalled_broker_shows_as_a_long_round_trip(quiet_broker, tmp_path, measured):
    tenant = noisy.create_tenant(quiet_broker, "canary")
    pid = quiet_broker.pid if measured else None
    with noisy.Canary(quiet_broker, tenant, work_dir=tmp_path, broker_pid=pid) as canary:
        time.sleep(0.5)
        quiet_broker.kill(signal.SIGSTOP)
        time.sleep(0.6)
        quiet_broker.kill(signal.SIGCONT)
        time.sleep(0.5)
        report = canary.stop()
    assert report.max_ms >= 500, report.summary()
    if measured:  # stopped is not waiting for a CPU: the stop is the broker's share in full
        # (less at most one 20 ms interval and the wait for a CPU after SIGCONT, which is taken out
        # and reached about 110 ms at load 9: the bound is the suite's own 250 ms)
        assert report.broker_max_ms is not None, report.summary()
        assert report.broker_max_ms > noisy.CI_BOUND.max_ms, report.summary()
    assert report.violations() != [], report.summary()
    assert report.misses == 0, report.summary()  # late, not lost


def test_the_verdict_uses_the_brokers_share_when_it_was_measured():
    slow_machine = noisy.CanaryReport.from_samples(
        [5.0] * 98 + [400.0, 600.0],
        misses=0, drops=0, lag_ms=1.0, errors=[],
        broker_samples=[5.0] * 98 + [20.0, 30.0], cpu_wait_max_ms=570.0,
    )  # fmt: skip
    assert slow_machine.violations() == [], slow_machine.summary()
    frozen_broker = noisy.CanaryReport.from_samples(
        [5.0] * 98 + [400.0, 600.0],
        misses=0, drops=0, lag_ms=1.0, errors=[],
        broker_samples=[5.0] * 98 + [390.0, 590.0], cpu_wait_max_ms=10.0,
    )  # fmt: skip
    assert frozen_broker.violations() == [
        "canary max 590 ms > 250 ms (the broker's own share)",
        "canary p99 390 ms > 100 ms (the broker's own share)",
    ]
    unmeasured = noisy.CanaryReport.from_samples(
        [5.0] * 98 + [400.0, 600.0], misses=0, drops=0, lag_ms=1.0, errors=[]
    )
    assert unmeasured.violations() == ["canary max 600 ms > 250 ms", "canary p99 400 ms > 100 ms"]


# What the harness's tests wait out on purpose: a miss deadline of 1 s (2 s where round trips
# after a resumed broker must not be misses on a loaded machine) instead of the cases' 5 s, which
# these tests would wait in full; the mechanism is the same, given to the child by --miss-after.
MISS_AFTER_S = 1.0


def test_a_canary_that_never_gets_its_messages_back_counts_misses(quiet_broker, tmp_path):
    tenant = noisy.create_tenant(quiet_broker, "canary")
    with noisy.Canary(quiet_broker, tenant, work_dir=tmp_path, miss_after_s=MISS_AFTER_S) as canary:
        quiet_broker.kill(signal.SIGSTOP)
        try:
            time.sleep(0.3)
            report = canary.stop()  # waits miss_after_s for what is in flight, then gives up
        finally:
            quiet_broker.kill(signal.SIGCONT)
    assert report.miss_after_s == MISS_AFTER_S, report  # the child's deadline is the one given
    assert report.misses >= 5, report.summary()
    assert report.max_ms >= MISS_AFTER_S * 1000, report.summary()
    assert any("missed" in problem for problem in report.violations()), report.summary()


def test_a_first_connect_that_times_out_is_a_start_retry_not_a_drop(quiet_broker, tmp_path):
    """A broker that answers the canary's first handshake after the connect timeout (a CI run at
    load 10, right after a set-up of 120,000 durable bindings) is retried before the canary
    measures anything: the canary counted it as a dropped connection, failing a test whose case
    had not begun. Here the broker is stopped through the whole first attempt."""
    tenant = noisy.create_tenant(quiet_broker, "canary")
    quiet_broker.kill(signal.SIGSTOP)
    miss_after_s = 2 * MISS_AFTER_S  # also the connect's timeout
    resume = threading.Timer(miss_after_s + 1.0, quiet_broker.kill, (signal.SIGCONT,))
    resume.start()
    try:
        with noisy.Canary(
            quiet_broker, tenant, work_dir=tmp_path, miss_after_s=miss_after_s
        ) as canary:
            time.sleep(0.5)
            report = canary.stop()
    finally:
        resume.cancel()
        quiet_broker.kill(signal.SIGCONT)
    assert report.drops == 0, report.summary()
    assert report.start_retries >= 1, report.summary()
    assert any("TimeoutError" in error for error in report.errors), report.summary()
    assert not any("dropped" in problem for problem in report.violations()), report.summary()
    assert report.misses == 0 and report.delivered == report.count > 0, report.summary()


def test_a_miss_deadline_that_is_not_positive_is_refused():
    for wrong in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="miss_after_s must be positive"):
            noisy.Canary(None, None, miss_after_s=wrong)  # type: ignore[arg-type]


def test_percentiles_are_nearest_rank():
    samples = sorted(float(value) for value in range(1, 101))
    assert noisy.percentile(samples, 50) == 50.0
    assert noisy.percentile(samples, 99) == 99.0
    assert noisy.percentile(samples, 100) == 100.0
    assert noisy.percentile([], 99) == 0.0
    assert noisy.percentile([7.0], 1) == 7.0


def test_a_report_names_every_broken_bound():
    bound = noisy.CanaryBound(max_ms=250, p99_ms=100)
    report = noisy.CanaryReport.from_samples(
        [1.0] * 98 + [150.0, 6000.0], misses=1, drops=1, lag_ms=3.0, errors=[]
    )
    assert report.violations(bound) == [
        "1 canary messages missed (not back in 5.0s)",
        "the canary's connection dropped 1 times",
        "canary max 6000 ms > 250 ms",
        "canary p99 150 ms > 100 ms",
    ]
    assert noisy.CanaryReport().violations(bound) == ["the canary sent nothing"]
