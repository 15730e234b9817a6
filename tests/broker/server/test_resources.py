"""ResourceMonitor.sample() with RSS, disk and malloc_trim replaced: no process, explicit values.

Why: the alarm logic was covered only through a real broker under memory pressure, where a
sample that kept an alarm one period too long (freed pages still counted in RSS until the next
malloc_trim) showed up as a consumer-side delay of about a second, not as a failure.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hutch_broker import memory
from hutch_broker.server import resources

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


def far_watermark(events: list[str]) -> resources.ResourceMonitor:
    """A watermark so high that the paging threshold never trims: only HeapTrim does."""
    return monitor(events, watermark=1 << 40)


def test_freed_memory_goes_back_at_the_next_sample(process: FakeProcess) -> None:
    """A hostile burst freed 140 MiB that glibc kept: the next sample returns it."""
    monitor_ = far_watermark([])
    process.live = REST
    monitor_.sample()
    process.live += 140 * MIB
    process.free(140 * MIB)
    monitor_.sample()
    assert process.trims == 1
    assert process.rss() == REST
    assert monitor_.mem_used == REST


def test_no_trim_within_the_slack(process: FakeProcess) -> None:
    monitor_ = far_watermark([])
    process.live = REST
    for _ in range(20):
        process.live += memory.TRIM_SLACK // 20
        monitor_.sample()
    assert process.rss() - REST <= memory.TRIM_SLACK
    assert process.trims == 0


def test_memory_really_held_is_walked_once_per_8_samples_at_most(process: FakeProcess) -> None:
    """Long queues hold 500 MiB for real: the trims space out 1, 2, 4, 8, 8... samples."""
    monitor_ = far_watermark([])
    process.live = REST
    monitor_.sample()
    process.live += 500 * MIB
    trimmed_at = []
    for index in range(40):
        before = process.trims
        monitor_.sample()
        if process.trims > before:
            trimmed_at.append(index)
    gaps = [b - a for a, b in itertools.pairwise(trimmed_at)]
    assert gaps[:3] == [1, 2, 4]
    assert set(gaps[3:]) == {memory.TRIM_BACKOFF_MAX}


def test_the_wait_starts_again_once_back_at_rest(process: FakeProcess) -> None:
    monitor_ = far_watermark([])
    process.live = REST
    monitor_.sample()
    process.live += 500 * MIB
    for _ in range(20):  # held for real: the wait is at its longest
        monitor_.sample()
    process.live = REST  # released (and returned by a trim)
    process.freed_untrimmed = 0
    monitor_.sample()
    process.live += 100 * MIB
    process.free(100 * MIB)
    before = process.trims
    monitor_.sample()
    assert process.trims == before + 1, "a new burst is returned at the next sample"
    assert process.rss() == REST


def test_heap_trim_table() -> None:
    """The policy alone: (RssAnon sampled, RssAnon after a trim if one runs) -> trims."""
    trim = memory.HeapTrim()
    decisions = []
    for used, after in [
        (REST, None),
        (REST + memory.TRIM_SLACK, None),  # at the slack: no
        (REST + memory.TRIM_SLACK + 1, REST + MIB),  # over it: trim
        (REST + 200 * MIB, REST + 199 * MIB),  # over again next sample: trim (wait 0)
        (REST + 200 * MIB, None),  # then wait one sample
        (REST + 200 * MIB, REST + 200 * MIB),
        (REST - MIB, None),  # a new lowest level: at rest, the wait is reset
        (REST + 100 * MIB, REST),
    ]:
        due = trim.due(used)
        decisions.append(due)
        if due:
            assert after is not None
            trim.trimmed(after)
    assert decisions == [False, False, True, True, False, True, False, True]
    assert trim.lowest == REST - MIB
