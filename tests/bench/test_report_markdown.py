"""docs/bench/report.md's broker table, generated from bench/run.py's JSON (`--report`).

Why: the report's figures were copied by hand from the runs, and a copied figure drifts from its
run. These feed a small document of two rounds to the generator and check every column of the
table it prints: rates with their range, ratios paired by round, CPU per message, the cores
the broker and the load generator used, PerfTest's latency, and what it does with failures and
bad input. No broker starts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import report  # noqa: E402
import run  # noqa: E402


def cell(broker: str, tool: str, round_index: int, **figures: Any) -> dict[str, Any]:
    if "consume_rate" in figures:
        figures.setdefault("publish_rate", figures["consume_rate"])
    return {"broker": broker, "scenario": 1, "tool": tool, "round": round_index} | figures


def document() -> dict[str, Any]:
    lat = {"unit": "µs"}
    runs = [
        # round 0: RabbitMQ 10k, Hutch 20k (2.0x); round 1: RabbitMQ 20k, Hutch 30k (1.5x)
        cell("rabbitmq", "loadgen", 0, consume_rate=10_000, cpu_us_per_message=40.0,
             broker_cores=1.2, load_cores=0.5),
        cell("hutch", "loadgen", 0, consume_rate=20_000, cpu_us_per_message=8.0,
             broker_cores=0.9, load_cores=0.6),
        cell("hutch", "loadgen", 1, consume_rate=30_000, cpu_us_per_message=12.0,
             broker_cores=1.0, load_cores=0.8),
        cell("rabbitmq", "loadgen", 1, consume_rate=20_000, cpu_us_per_message=30.0,
             broker_cores=1.4, load_cores=0.7),
        cell("rabbitmq", "perftest", 0, consume_rate=8_000, cpu_us_per_message=50.0,
             broker_cores=0.8, load_cores=1.1,
             latency=lat | {"median": 12_300, "p95": 90_000, "p99": 250_000}),
        cell("hutch", "perftest", 0, consume_rate=16_000, cpu_us_per_message=11.0,
             broker_cores=0.5, load_cores=1.3, latency=lat | {"median": 2_000, "p95": 5_000, "p99": 9_000}),
        cell("hutch", "perftest", 1, error="PerfTest exited 1 without a summary: boom"),
        cell("rabbitmq", "perftest", 1, consume_rate=6_000, cpu_us_per_message=70.0,
             broker_cores=0.6, load_cores=1.2,
             latency=lat | {"median": 20_700, "p95": 99_000, "p99": 350_000}),
    ]  # fmt: skip
    return {
        "started_at": "2026-11-28T17:00:00+00:00",
        "total_seconds": 1200.0,
        "arguments": {"duration": 20, "repeat": 2},
        "machine": {"cpus": 2, "git_commit": "0123456789abcdef"},
        "scenarios": {"1": "1 producer, 1 queue, 1 consumer"},
        "runs": runs,
    }


def rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[part.strip() for part in line.strip("|").split("|")] for line in lines]


def test_the_table_has_every_figure_of_each_cell() -> None:
    header, rule, loadgen, perftest = rows(report.markdown(document()))
    assert header == [
        "scenario", "tool", "RabbitMQ recv msg/s", "Hutch recv msg/s", "Hutch/RabbitMQ recv",
        "RabbitMQ CPU µs/msg", "Hutch CPU µs/msg", "Hutch/RabbitMQ CPU/msg",
        "RabbitMQ cores of 2: broker + load", "Hutch cores of 2: broker + load",
        "RabbitMQ p50 / p99 ms", "Hutch p50 / p99 ms",
    ]  # fmt: skip
    assert rule == ["---"] * len(header)
    # Ratios pair rounds: 2.0x and 1.5x, median 1.75x; not 25k / 15k of the medians.
    assert loadgen == [
        "S1", "loadgen", "15,000 (10,000-20,000)", "25,000 (20,000-30,000)", "1.75x (1.50-2.00)",
        "35.0 (30.0-40.0)", "10.0 (8.0-12.0)", "0.30x (0.20-0.40)",
        "1.30 + 0.60", "0.95 + 0.70", "-", "-",
    ]  # fmt: skip
    # Hutch's failed round 1 is left out: its one good round pairs with RabbitMQ's round 0.
    assert perftest == [
        "S1", "perftest", "7,000 (6,000-8,000)", "16,000 (n=1)", "2.00x (n=1)",
        "60.0 (50.0-70.0)", "11.0 (n=1)", "0.22x (n=1)",
        "0.70 + 1.15", "0.50 + 1.30", "16.5 / 300", "2.0 / 9.0",
    ]  # fmt: skip


def test_the_notes_name_the_scenarios_and_the_failed_rounds() -> None:
    text = report.markdown(document())
    assert "S1: 1 producer, 1 queue, 1 consumer." in text
    assert (
        "Left out: S1 perftest Hutch: 1 of 2 rounds failed "
        "(PerfTest exited 1 without a summary: boom)."
    ) in text


def test_one_broker_alone_has_no_ratio_columns() -> None:
    alone = document()
    alone["runs"] = [r for r in alone["runs"] if r["broker"] == "hutch"]
    header, _, loadgen, _ = rows(report.markdown(alone))
    assert "Hutch/RabbitMQ recv" not in header
    assert loadgen[:4] == ["S1", "loadgen", "25,000 (20,000-30,000)", "10.0 (8.0-12.0)"]


def test_the_context_says_when_how_long_and_how_busy() -> None:
    doc = document()
    for index, run_ in enumerate(doc["runs"]):
        run_["load"] = {"loadavg": [3.0 + index, 2.0, 1.0], "procs_running": index}
    assert report.context(doc) == (
        "Measured from 2026-11-28T17:00:00+00:00 for 20 min: 2 interleaved rounds of 20 s per "
        "cell, broker order alternating, commit 0123456. Machine: 1-min load average "
        "3.00-10.00 on 2 CPUs, other runnable processes at sample start 0-7."
    )


def test_report_mode_prints_the_table_from_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document()))
    assert run.main(["--report", str(path)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(report.markdown(document()))
    assert "Measured from 2026-11-28T17:00:00+00:00" in printed


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "cannot read"),
        ("{not json", "is not JSON"),
        ('{"runs": 3}', "not a bench/run.py results file"),
    ],
)
def test_report_mode_refuses_a_file_that_is_not_a_results_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, why: str
) -> None:
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        run.main(["--report", str(path)])
    assert exit_.value.code == 2
    assert why in capsys.readouterr().err


def test_a_document_without_runs_of_either_broker_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"runs": []}))
    assert run.main(["--report", str(path)]) == 2
    assert "holds no runs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="neither of"):
        report.markdown({"runs": [cell("hutch-base", "loadgen", 0, consume_rate=1.0)]})


def test_the_report_page_shows_the_same_table_and_heads_with_both_ratios(tmp_path: Path) -> None:
    import comparison  # matplotlib: only this test needs it

    doc = document()
    headline: list[str] = []
    text = "\n".join(comparison.broker_section(doc, tmp_path, headline))
    assert report.markdown(doc) in text
    assert report.context(doc) in text
    # Per cell, paired by round: recv 1.75x and 2.00x; CPU per message 0.30x and 0.22x.
    assert headline[0].startswith("Broker throughput: Hutch consumes 1.87x RabbitMQ's rate")
    assert headline[1] == (
        "Broker CPU per message: Hutch spends 0.26x RabbitMQ's (geometric mean over the same "
        "runs; range 0.22x-0.30x)"
    )
    assert (tmp_path / "broker-throughput.png").is_file()
