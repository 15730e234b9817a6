"""bench/flush_stats.py's reading and summary of what flushes carried (pure: no broker; the hook
itself runs only inside a broker that flush_stats.py starts)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import flush_stats
import run


def test_the_summary_is_per_consumed_message_and_per_flush():
    counts = Counter(
        flushes=200, frames=1000, bytes=409600, buffered_before=50, buffered_after=20,
        flush_cpu_ns=800_000, flush_wall_ns=1_600_000, write_cpu_ns=400_000,
        write_wall_ns=480_000, write_user_us=100, write_sys_us=300, writes=200,
    )  # fmt: skip
    sizes = Counter({"2048": 150, "1024": 50, "4096": 0})
    summary = flush_stats.summary(counts, sizes, consumed=800)
    assert summary["flushes_per_message"] == 0.25
    assert summary["frames_per_flush"] == 5.0
    assert summary["bytes_per_flush"] == 2048
    assert summary["buffered_before_share"] == 0.25
    assert summary["buffered_after_share"] == 0.1
    assert summary["flush_cpu_us_per_message"] == 1.0
    assert summary["flush_wall_us_per_message"] == 2.0
    assert summary["write_cpu_us_per_message"] == 0.5
    assert summary["write_wall_us_per_message"] == 0.6
    assert summary["write_user_share"] == 0.25
    assert summary["write_cpu_us_per_call"] == 2.0
    assert list(summary["bytes_per_flush_buckets"].items()) == [("1024", 50), ("2048", 150)]


@pytest.mark.parametrize(("flushes", "consumed"), [(0, 100), (10, 0)])
def test_an_empty_window_is_an_error_not_a_ratio(flushes, consumed):
    with pytest.raises(run.BenchError, match="nothing to summarize"):
        flush_stats.summary(Counter(flushes=flushes), Counter(), consumed)


def test_counts_of_several_processes_are_summed(tmp_path):
    (tmp_path / "flush-1.json").write_text(
        '{"counts": {"flushes": 3, "bytes": 10}, "sizes": {"8": 3}}'
    )
    (tmp_path / "flush-2.json").write_text('{"counts": {"flushes": 2}, "sizes": {"8": 1, "2": 1}}')
    (tmp_path / "flush-3.new").write_text("{partial")
    counts, sizes = flush_stats.read_counts(tmp_path)
    assert counts == Counter(flushes=5, bytes=10)
    assert sizes == Counter({"8": 4, "2": 1})
