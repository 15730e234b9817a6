"""The executor-Pod section's table (bench/stream_pods_report.py) from small results files.

Why: docs/bench/report.md's executor-Pod table was typed by hand from several
bench/stream_pods_bench.py files; the generator that replaces that must put each file's
figure in the right row and column, name a run at another quota, and keep that run out of the
CPU rows, or the report would quote figures no run measured.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import comparison  # noqa: E402
import stream_pods_bench  # noqa: E402
import stream_pods_report  # noqa: E402


def run(executors: int, index: int, rate: float, executor: float, reading: float) -> dict[str, Any]:
    """One run as stream_pods_bench.run_figures writes it (rows over seconds is the rate)."""
    rows = 1_000 * rate
    return {
        "executors": executors,
        "round": index,
        "rows": rows,
        "seconds": rows / rate,
        "rate": rate,
        "cpu_s_per_million": {
            "executor": executor,
            "driver": executor / 100 * executors,
            "broker": executor / 50,
        },
        "driver_cpu_per_s_reading": reading,
        "driver_cpu_per_s_idle": None if index else 0.02,
    }


def results(messages: int, batch: int, cpu: str, scale: float) -> dict[str, Any]:
    """A results file as stream_pods_bench.main writes it: two rounds of 1 and 2 executors,
    rates and CPU per message `scale` times the first file's."""
    runs = [
        run(1, 0, 1_000 * scale, 400.0 * scale, 0.11),
        run(2, 0, 1_500 * scale, 450.0 * scale, 0.15),
        run(1, 1, 1_100 * scale, 360.0 * scale, 0.20),
        run(2, 1, 1_870 * scale, 400.0 * scale, 0.25),
    ]
    return {
        "runs": runs,
        "summary": stream_pods_bench.summary(runs),
        "arguments": {"messages": str(messages), "max_per_trigger": str(batch),
                      "executor_cpu": cpu},
        "machine_load": "1-min load average 1.00-2.00 on 2 CPUs",
    }  # fmt: skip


def written(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_the_table_has_a_rate_row_per_file_and_cpu_rows_of_the_reference_quota(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [
        written(tmp_path, "a.json", results(1_000_000, 250_000, "0.4", 1.0)),
        written(tmp_path, "b.json", results(200_000, 50_000, "0.4", 2.0)),
        written(tmp_path, "c.json", results(1_000_000, 250_000, "0.3", 3.0)),
    ]
    assert stream_pods_report.main([str(path) for path in files]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "| figure | 1 executor | 2 executors | 2 over 1 (paired by round) |",
        "|---|---|---|---|",
        "| read rate, 1 M messages, 250 k a batch | 1,050 msg/s (1,000-1,100, n=2) "
        "| 1,685 msg/s (1,500-1,870, n=2) | **1.60x** (1.50-1.70, n=2) |",
        "| read rate, 200 k messages, 50 k a batch | 2,100 msg/s (2,000-2,200, n=2) "
        "| 3,370 msg/s (3,000-3,740, n=2) | **1.60x** (1.50-1.70, n=2) |",
        "| read rate, 1 M messages, 250 k a batch, executors at 0.3 CPU "
        "| 3,150 msg/s (3,000-3,300, n=2) | 5,055 msg/s (4,500-5,610, n=2) "
        "| **1.60x** (1.50-1.70, n=2) |",
        "| executors' CPU, 1 M / 200 k | 380.0 / 760.0 s per M msg | 425.0 / 850.0 s per M msg | |",
        # The rounds of the 0.4 files: 400 s/M x 1,000 msg/s = 0.40 up to 800 x 2,000 = 1.60 for
        # one executor; the 0.3 file's 1,200 x 3,000 = 3.60 is not among them.
        "| executors' CPU per second of reading | 0.40-1.60 (quota 0.4) "
        "| 0.68-2.99 (quota 0.8) | |",
        "| driver's CPU, 1 M / 200 k | 3.8 / 7.6 s per M msg | 8.5 / 17.0 s per M msg | |",
        "| driver's CPU per second, reading / idle after | 0.11-0.20 / 0.02 | 0.15-0.25 / 0.02 | |",
        "| broker's CPU, 1 M / 200 k | 7.6 / 15.2 s per M msg | 8.5 / 17.0 s per M msg | |",
    ]


def test_the_report_section_is_the_table_or_says_there_are_no_results() -> None:
    doc = results(1_000_000, 250_000, "0.4", 1.0)
    section = comparison.stream_pods_section([doc])
    assert section[0].startswith("## Stream source with executor Pods on the real node")
    assert section[2:4] == stream_pods_report.markdown([doc])[:2]
    assert "1-min load average 1.00-2.00" in section[-2]
    assert "No bench/stream_pods_bench.py results found." in comparison.stream_pods_section([])


def test_unreadable_results_are_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = written(tmp_path, "broken.json", {"runs": []})
    assert stream_pods_report.main([str(broken), str(tmp_path / "missing.json")]) == 1
    assert "cannot read the results" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"no bench/stream_pods_bench\.py results"):
        stream_pods_report.table_rows([])


def test_the_stream_section_never_takes_a_stream_pods_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both benches' files match stream-*.json; the newest, a stream-pods one, was taken for
    stream_bench.py's section, which then failed on its summary."""
    monkeypatch.setattr(comparison, "RESULTS", tmp_path)
    kafka = written(tmp_path, "stream-run1.json", {"summary": {"hutch_over_kafka": {}}})
    pods = written(tmp_path, "stream-pods-run1.json", results(1_000_000, 250_000, "0.4", 1.0))
    args = comparison.argparse.Namespace(
        broker=None, spark=None, spark_node=None, operator=None, stream=None
    )
    os.utime(kafka, (1_000, 1_000))
    os.utime(pods, (2_000, 2_000))  # the newest
    assert comparison.pick_inputs(args)["stream"] == kafka
    assert comparison.pick_stream_pods(None) == [pods]
