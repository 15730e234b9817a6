"""The benchmarks' method: alternating rounds, medians with spread, ratios paired by round.

Why: a benchmark that passes only in one order is noise. These pin the pure parts that make the
figures order-independent (bench/rounds.py) and the table and report that read repeated rounds
(bench/report.py), without starting a broker.
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
import rounds  # noqa: E402


def test_the_broker_order_alternates_from_round_to_round() -> None:
    assert rounds.orders(["rabbitmq", "hutch"], 3) == [
        ["rabbitmq", "hutch"],
        ["hutch", "rabbitmq"],
        ["rabbitmq", "hutch"],
    ]
    assert rounds.orders(["hutch"], 2) == [["hutch"], ["hutch"]]
    with pytest.raises(ValueError, match="at least 1"):
        rounds.orders(["hutch"], 0)


def test_a_summary_is_the_median_with_its_range() -> None:
    spread = rounds.summarize([30.0, 10.0, 20.0, 100.0])
    assert (spread.n, spread.median, spread.low, spread.high) == (4, 25.0, 10.0, 100.0)
    assert spread.relative == pytest.approx(90 / 25)
    assert spread.text(" msg/s") == "25 msg/s (10-100, n=4)"
    assert rounds.summarize([7.0]).text() == "7 (n=1)"
    with pytest.raises(ValueError, match="no samples"):
        rounds.summarize([])


def test_ratios_are_paired_by_round_not_divided_as_medians() -> None:
    # Round 2 was slow for both (a neighbour's burst). Paired, two rounds of three say 1.5x;
    # dividing the medians (110 / 100) would say 1.1x.
    hutch = [150.0, 30.0, 110.0]
    rabbitmq = [100.0, 20.0, 110.0]
    paired = rounds.ratios(hutch, rabbitmq)
    assert (paired.median, paired.low, paired.high) == (1.5, 1.0, 1.5)
    with pytest.raises(ValueError, match="not paired"):
        rounds.ratios([1.0], [1.0, 2.0])


def test_load_reads_the_load_average_and_runnable_processes(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  1 2 3\nprocs_running 4\nprocs_blocked 0\n")
    seen = rounds.load(tmp_path)
    assert seen["procs_running"] == 3
    assert len(seen["loadavg"]) == 3
    text = rounds.busiest([{"load": {"loadavg": [0.5, 0, 0], "procs_running": 1}}], cpus=2)
    assert (
        text
        == "1-min load average 0.50-0.50 on 2 CPUs, other runnable processes at sample start 1-1"
    )


def _run(broker: str, round_index: int, consumed: float, **extra: Any) -> dict[str, Any]:
    return {
        "broker": broker,
        "scenario": 1,
        "tool": "loadgen",
        "round": round_index,
        "publish_rate": consumed,
        "consume_rate": consumed,
        "peak_rss_bytes": (round_index + 1) * 2**20,
        **extra,
    }


def test_results_are_written_as_json_where_asked(tmp_path: Path, capsys: Any) -> None:
    output = tmp_path / "deeper" / "spark.json"
    written = rounds.write_results({"samples": [1, 2]}, output, "spark")
    assert written == output
    assert json.loads(output.read_text()) == {"samples": [1, 2]}
    assert str(output) in capsys.readouterr().out


def test_the_table_shows_medians_ranges_and_the_paired_ratio() -> None:
    runs = [
        _run("rabbitmq", 0, 100.0),
        _run("hutch", 0, 150.0),
        _run("hutch", 1, 30.0),
        _run("rabbitmq", 1, 20.0),
        _run("rabbitmq", 2, 110.0),
        _run("hutch", 2, 110.0),
    ]
    text = report.table(runs, ["rabbitmq", "hutch"])
    row = text.splitlines()[2]
    assert "100 / 100 (20-110, 3)" in row  # RabbitMQ: median of 100, 20, 110
    assert "110 / 110 (30-150, 3)" in row  # Hutch: median of 150, 30, 110
    assert "1.50 (1.00-1.50)" in row  # per round: 1.5, 1.5, 1.0
    assert "3 MiB" in row  # the highest peak RSS of the rounds


def test_a_failed_round_is_left_out_of_the_ratio_and_shown() -> None:
    runs = [
        _run("rabbitmq", 0, 100.0),
        _run("hutch", 0, 150.0),
        _run("rabbitmq", 1, 100.0),
        {**_run("hutch", 1, 0.0), "error": "hutch died during the run"},
    ]
    report.number_failures(runs)
    grouped = report.group(runs)[(1, "loadgen")]
    ratio = report.paired_ratio(grouped["hutch"], grouped["rabbitmq"])
    assert ratio is not None and (ratio.n, ratio.median) == (1, 1.5)
    assert "1 FAILED [1]" in report.table(runs, ["rabbitmq", "hutch"])
    merged = report.median_run(grouped["hutch"])
    assert merged["consume_rate"] == 150.0 and merged["n"] == 1


def test_a_baseline_tree_gets_its_own_column_and_a_ratio_paired_by_round() -> None:
    runs = [
        _run("hutch-base", 0, 100.0),
        _run("hutch", 0, 110.0),
        _run("hutch", 1, 50.0),
        _run("hutch-base", 1, 40.0),
        _run("hutch-base", 2, 100.0),
        _run("hutch", 2, 100.0),
    ]
    text = report.table(runs, ["hutch-base", "hutch"])
    header, row = text.splitlines()[0], text.splitlines()[2]
    assert "Hutch base msgs/s" in header and "Hutch/base recv" in header
    assert "Hutch/RabbitMQ" not in header
    assert "1.10 (1.00-1.25)" in row  # per round: 1.1, 1.25, 1.0
    grouped = report.group(runs)[(1, "loadgen")]
    assert (
        report.paired_ratio(grouped["hutch"], grouped["hutch-base"], "cpu_us_per_message") is None
    )
    cpu = [_run(r["broker"], r["round"], r["consume_rate"]) for r in runs]
    for run, us in zip(cpu, [10.0, 9.0, 10.0, 12.0, 10.0, 11.0], strict=True):
        run["cpu_us_per_message"] = us
    assert "0.90 (0.83-1.10)" in report.table(cpu, ["hutch-base", "hutch"]).splitlines()[2]


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_run_takes_a_baseline_tree_and_measures_it_first(tmp_path: Path) -> None:
    import run

    (tmp_path / "broker" / "hutch_broker").mkdir(parents=True)
    (tmp_path / "broker" / "hutch_broker" / "__main__.py").write_text("")
    args = run.parse_args(["--baseline", str(tmp_path), "--brokers", "hutch"])
    assert args.baseline == tmp_path / "broker"
    assert args.brokers == ["hutch-base", "hutch"]
    broker = run.make_broker("hutch-base", args.baseline)
    assert broker._environment()["PYTHONPATH"].split(":")[0] == str(tmp_path / "broker")


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_run_starts_both_hutch_brokers_with_the_same_config(tmp_path: Path) -> None:
    import run

    (tmp_path / "broker" / "hutch_broker").mkdir(parents=True)
    (tmp_path / "broker" / "hutch_broker" / "__main__.py").write_text("")
    config = tmp_path / "hutch.conf"
    config.write_text("stamp_message_id = true\n")
    args = run.parse_args(["--baseline", str(tmp_path), "--hutch-config", str(config)])
    for name in ("hutch", "hutch-base"):
        command = run.make_broker(name, args.baseline, args.hutch_config)._command()
        assert command[-2:] == ["--config", str(config)]
    with pytest.raises(SystemExit):
        run.parse_args(["--hutch-config", str(tmp_path / "missing.conf")])


def test_run_refuses_a_baseline_that_is_no_source_tree(tmp_path: Path) -> None:
    import run

    with pytest.raises(SystemExit):
        run.parse_args(["--baseline", str(tmp_path)])
    with pytest.raises(SystemExit):
        run.parse_args(["--brokers", "hutch-base"])  # no --baseline
