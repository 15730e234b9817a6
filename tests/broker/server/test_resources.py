"""ResourceMonitor.sample() with RSS, disk and malloc_trim replaced: no process, explicit values.

Why: the alarm logic was covered only through a real broker under memory pressure, where a
sample that kept an alarm one period too long (freed pages still counted in RSS until the next
malloc_trim) showed up as a consumer-side delay of about a second, not as a failure.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pytest
from hutch_broker import memory
from hutch_broker.config import BrokerConfig
from hutch_broker.server import resources
from hutch_broker.server.amqp import AMQPConnection
from hutch_broker.server.app import BrokerServer

LIMIT = 1000  # bytes: the watermark; paging starts above 500


class FakeProcess:
    """RSS as /proc would report it: freed bytes stay counted until malloc_trim runs."""

    def __init__(self) -> None:
        self.live = 0
        self.freed_untrimmed = 0
        self.trims = 0
        self.disk_free = 10_000

    def rss(self) -> int:
        return self.live + self.freed_untrimmed

    def free(self, amount: int) -> None:
        self.live -= amount
        self.freed_untrimmed += amount

    def trim(self) -> None:
        self.trims += 1
        self.freed_untrimmed = 0


@pytest.fixture
def process(monkeypatch: pytest.MonkeyPatch) -> FakeProcess:
    fake = FakeProcess()
    monkeypatch.setattr(resources, "_read_rss_anon", fake.rss)
    monkeypatch.setattr(resources, "_release_freed_memory", fake.trim)
    monkeypatch.setattr(resources, "_disk_free", lambda _path: fake.disk_free)
    return fake


def monitor(events: list[str], watermark: int = LIMIT) -> resources.ResourceMonitor:
    return resources.ResourceMonitor(
        watermark=memory.Watermark(relative=None, absolute=watermark),
        total_memory=4 * LIMIT,
        data_dir=Path("/nonexistent"),
        disk_free_limit=100,
        on_clear=lambda: events.append("clear"),
        on_paging=lambda active: events.append(f"paging={active}"),
    )


def test_the_alarm_clears_on_the_first_sample_after_a_drain(process: FakeProcess) -> None:
    events: list[str] = []
    monitor_ = monitor(events)
    process.live = 1200
    monitor_.sample()
    assert monitor_.memory_alarm and monitor_.publishing_blocked
    assert monitor_.block_reason == "low on memory"

    process.free(1100)  # a consumer drained the queue: glibc still holds the pages
    monitor_.sample()

    assert not monitor_.memory_alarm
    assert monitor_.mem_used == 100
    assert events[-2:] == ["paging=False", "clear"]


def test_paging_follows_half_the_watermark_and_trims_only_above_it(process: FakeProcess) -> None:
    events: list[str] = []
    monitor_ = monitor(events)
    process.live = 400
    monitor_.sample()
    assert (events, process.trims, monitor_.memory_alarm) == (["paging=False"], 0, False)

    process.live = 600
    monitor_.sample()
    assert events[-1] == "paging=True"
    assert process.trims == 1
    assert not monitor_.memory_alarm  # paging starts before the alarm
    assert "clear" not in events


def test_freed_pages_alone_never_set_the_alarm(process: FakeProcess) -> None:
    events: list[str] = []
    monitor_ = monitor(events)
    process.live = 1100
    process.free(700)  # RSS still says 1100, live data is 400
    monitor_.sample()
    assert not monitor_.memory_alarm
    assert monitor_.mem_used == 400


def test_disk_alarm_blocks_and_clears(process: FakeProcess) -> None:
    events: list[str] = []
    monitor_ = monitor(events)
    process.disk_free = 50
    monitor_.sample()
    assert monitor_.disk_alarm and monitor_.publishing_blocked
    assert monitor_.block_reason == "low on disk"
    assert monitor_.alarms() == ["disk"]

    process.disk_free = 500
    monitor_.sample()
    assert not monitor_.publishing_blocked
    assert events[-1] == "clear"


def test_each_alarm_says_when_it_is_set_and_cleared_once_not_per_sample(
    process: FakeProcess, caplog: pytest.LogCaptureFixture
) -> None:
    monitor_ = monitor([])
    process.live, process.disk_free = 1200, 50
    with caplog.at_level(logging.WARNING, logger=resources.log.name):
        monitor_.sample()
        monitor_.sample()  # both still set: nothing more to say
        process.live, process.disk_free = 100, 500
        monitor_.sample()
        monitor_.sample()
    assert [record.getMessage() for record in caplog.records] == [
        f"memory alarm set: used 1200, limit {monitor_.mem_limit}",
        "disk alarm set: free 50, limit 100",
        f"memory alarm cleared: used 100, limit {monitor_.mem_limit}",
        "disk alarm cleared: free 500, limit 100",
    ]


def test_a_zero_watermark_never_alarms_or_pages(process: FakeProcess) -> None:
    events: list[str] = []
    monitor_ = monitor(events, watermark=0)
    process.live = 10**9
    monitor_.sample()
    assert not monitor_.memory_alarm
    assert events == ["paging=False"]
    assert process.trims == 0


# -- giving freed heap memory back (memory.HeapTrim) ---------------------------------------

MIB = 1024 * 1024
REST = 40 * MIB  # RssAnon of a broker at rest


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def far_watermark(clock: Clock) -> resources.ResourceMonitor:
    """A watermark so high that the paging threshold never trims: only HeapTrim does."""
    return resources.ResourceMonitor(
        watermark=memory.Watermark(relative=None, absolute=1 << 40),
        total_memory=1 << 42,
        data_dir=Path("/nonexistent"),
        disk_free_limit=100,
        clock=clock,
    )


def tick(monitor_: resources.ResourceMonitor, clock: Clock, seconds: float = 1.0) -> None:
    clock.now += seconds
    monitor_.sample()


def test_freed_memory_goes_back_at_the_next_sample(process: FakeProcess) -> None:
    """A hostile burst freed 140 MiB that glibc kept: the next sample returns it."""
    clock = Clock()
    monitor_ = far_watermark(clock)
    process.live = REST
    tick(monitor_, clock)
    process.live += 140 * MIB
    process.free(140 * MIB)
    tick(monitor_, clock)
    assert process.trims == 1
    assert process.rss() == REST
    assert monitor_.mem_used == REST


def test_no_trim_within_the_slack(process: FakeProcess) -> None:
    clock = Clock()
    monitor_ = far_watermark(clock)
    process.live = REST
    for _ in range(20):
        process.live += memory.TRIM_SLACK // 20
        tick(monitor_, clock)
    assert process.rss() - REST <= memory.TRIM_SLACK
    assert process.trims == 0


def test_memory_really_held_is_walked_once_per_8_s_at_most(process: FakeProcess) -> None:
    """Long queues hold 500 MiB for real: the trims space out 1, 2, 4, 8, 8... seconds."""
    clock = Clock()
    monitor_ = far_watermark(clock)
    process.live = REST
    tick(monitor_, clock)
    process.live += 500 * MIB
    trimmed_at = []
    for second in range(40):
        before = process.trims
        tick(monitor_, clock)
        if process.trims > before:
            trimmed_at.append(second)
    gaps = [b - a for a, b in itertools.pairwise(trimmed_at)]
    assert gaps[:3] == [1, 2, 4]
    assert set(gaps[3:]) == {memory.TRIM_BACKOFF_MAX}


def test_frequent_samples_do_not_trim_more_often(process: FakeProcess) -> None:
    """Samples come after every 1/32 of the watermark read too, many a second under a heavy
    publisher: the trims still follow the clock, not the samples."""
    clock = Clock()
    monitor_ = far_watermark(clock)
    process.live = REST
    tick(monitor_, clock)
    for _ in range(400):  # 20 s of churn, sampled 20 times a second
        process.live += 100 * MIB
        process.free(100 * MIB)
        tick(monitor_, clock, 0.05)
    assert process.trims <= 1 + 1 + 1 + 20 // 8 + 1  # at 1, 2, 4 s, then every 8 s


def test_the_wait_starts_again_once_back_at_rest(process: FakeProcess) -> None:
    clock = Clock()
    monitor_ = far_watermark(clock)
    process.live = REST
    tick(monitor_, clock)
    process.live += 500 * MIB
    for _ in range(20):  # held for real: the wait is at its longest
        tick(monitor_, clock)
    process.live = REST  # released (and returned by a trim)
    process.freed_untrimmed = 0
    for _ in range(int(memory.TRIM_BACKOFF_MAX) + 1):  # and at rest for a while
        tick(monitor_, clock)
    process.live += 100 * MIB
    process.free(100 * MIB)
    before = process.trims
    tick(monitor_, clock)
    assert process.trims == before + 1, "a new burst is returned at the next sample"
    assert process.rss() == REST


def test_heap_trim_table() -> None:
    """The policy alone: (seconds, RssAnon sampled, RssAnon after a trim if one runs)."""
    trim = memory.HeapTrim()
    decisions = []
    for now, used, after in [
        (0.0, REST, None),
        (1.0, REST + memory.TRIM_SLACK, None),  # at the slack: no
        (2.0, REST + memory.TRIM_SLACK + 1, REST + MIB),  # over it: trim, next in 1 s
        (2.5, REST + 200 * MIB, None),  # too soon
        (3.0, REST + 200 * MIB, REST + 199 * MIB),  # trim, next in 2 s
        (4.0, REST + 200 * MIB, None),
        (5.0, REST + 200 * MIB, REST + 200 * MIB),  # trim, next in 4 s
        (6.0, REST - MIB, None),  # a new lowest level: at rest...
        (7.0, REST + 100 * MIB, None),  # ...not for long: the wait stands
        (9.0, REST + 100 * MIB, REST),  # trim, next in 8 s
        (10.0, REST, None),  # at rest...
        (18.0, REST, None),  # ...for 8 s: the wait is reset
        (18.1, REST + 100 * MIB, REST),
    ]:
        due = trim.due(used, now)
        decisions.append(due)
        if due:
            assert after is not None
            trim.trimmed(after, now)
    trims = [index for index, due in enumerate(decisions) if due]
    assert trims == [2, 4, 6, 9, 12]
    assert trim.lowest == REST - MIB


# -- how often the server samples under a fast publisher ------------------------------------


def test_a_changed_watermark_changes_the_limit_and_the_sampling_distance(
    process: FakeProcess,
) -> None:
    """``mem_limit`` and ``sample_after_bytes`` are kept, not computed per read: each change of
    the watermark (MEM-7) or of the total memory must reach both."""
    monitor_ = monitor([], watermark=64 * MIB)
    assert (monitor_.mem_limit, monitor_.sample_after_bytes) == (64 * MIB, 2 * MIB)

    monitor_.set_watermark({"absolute": 320 * MIB})
    assert (monitor_.mem_limit, monitor_.sample_after_bytes) == (320 * MIB, 10 * MIB)

    monitor_.set_watermark({"relative": 0.5})
    monitor_.total_memory = 1024 * MIB
    assert (monitor_.mem_limit, monitor_.sample_after_bytes) == (512 * MIB, 16 * MIB)

    monitor_.set_watermark({"absolute": 0})  # disabled: still sampled, every MiB
    assert (monitor_.mem_limit, monitor_.sample_after_bytes) == (0, MIB)
    process.live = 10**9
    monitor_.sample()
    assert not monitor_.memory_alarm


async def test_the_end_of_a_tick_samples_after_the_changed_watermarks_distance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, process: FakeProcess
) -> None:
    """The server's tick reads the sampling distance the monitor keeps: after a watermark
    change, a publisher's bytes are sampled at the new distance, not the one read at start."""
    config = BrokerConfig(data_dir=tmp_path / "data", watermark_absolute=640 * MIB)
    server = BrokerServer(config)
    samples: list[int] = []
    monkeypatch.setattr(server.resources, "sample", lambda: samples.append(0))
    monkeypatch.setattr(AMQPConnection, "received_bytes", 0)  # a class-wide count
    try:

        def tick_after(ingress: int) -> bool:
            server.context.ingress_bytes = ingress
            before = len(samples)
            server._end_of_tick()
            return len(samples) > before

        assert not tick_after(20 * MIB - 1)
        assert tick_after(20 * MIB)  # 1/32 of 640 MiB
        server.resources.set_watermark({"absolute": 64 * MIB})  # as the HTTP API sets it
        assert not tick_after(2 * MIB - 1)
        assert tick_after(2 * MIB)
        assert server.context.ingress_bytes == 0, "counted afresh from each sample"
    finally:
        server.store.close()
        server.paging_store.close()
        server.definitions.close()
