"""The latency cell of bench/run.py (``--latency-rates``): PerfTest held to one offered rate on
both brokers, and its table "latency at a fixed rate".

Why: PerfTest unthrottled measures each broker's latency as a queueing time at its own rate,
so the two brokers' latencies are taken at different loads (#32). A latency cell offers both
the same rate, and the comparison is only fair if the rate is split right over PerfTest's
producers (its ``--rate`` is per producer), if a broker that could not carry it is shown as
such, and if its runs never fold into the throughput cell of the same scenario and tool (they
share both). These check the arguments, the plan, the aggregation and the tables on made-up
runs; no broker or PerfTest starts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import perftest  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import scenarios  # noqa: E402

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
LIB = Path("/nonexistent/lib")


def rate_args(command: list[str]) -> list[str]:
    return command[command.index("--rate") :][:2] if "--rate" in command else []


# -- PerfTest's arguments ------------------------------------------------------------------------


def test_the_offered_rate_is_split_over_perftests_producers() -> None:
    one = perftest.commands(LIB, URL, scenarios.SCENARIOS[1], 5, 10_000)
    assert [rate_args(command) for command in one] == [["--rate", "10000"]]
    four = perftest.commands(LIB, URL, scenarios.SCENARIOS[4], 5, 10_000)
    assert [rate_args(command) for command in four] == [["--rate", "2500"]]
    # Scenario 5: one instance per vhost with two producers each; all four at 2,500.
    split = perftest.commands(LIB, URL, scenarios.SCENARIOS[5], 5, 10_000)
    assert [rate_args(command) for command in split] == [["--rate", "2500"]] * 2
    assert [command[command.index("--producers") + 1] for command in split] == ["2", "2"]


def test_without_an_offered_rate_perftest_publishes_as_fast_as_it_goes() -> None:
    for number in (1, 4, 5):
        for command in perftest.commands(LIB, URL, scenarios.SCENARIOS[number], 5):
            assert "--rate" not in command


def test_a_rate_that_does_not_split_evenly_is_refused_not_rounded() -> None:
    with pytest.raises(perftest.PerfTestError, match="over scenario 4's 4 producers"):
        perftest.producer_rate(scenarios.SCENARIOS[4], 10_001)
    with pytest.raises(perftest.PerfTestError, match="above 0"):
        perftest.producer_rate(scenarios.SCENARIOS[1], 0)


def test_the_receiving_rate_to_expect_counts_the_queues_a_message_reaches() -> None:
    # Scenario 3's PerfTest key bench.42.3 reaches queues 5, 7 and 9.
    assert [perftest.fan_out(scenarios.SCENARIOS[n]) for n in (1, 2, 3, 4, 5)] == [1, 1, 3, 1, 1]
    assert run.fixed_rate_fields(scenarios.SCENARIOS[3], 10_000) == {
        "offered_rate": 10_000,
        "expected_consume_rate": 30_000,
    }
    assert run.fixed_rate_fields(scenarios.SCENARIOS[3], None) == {}


SUMMARY_LINES = """\
id: test-070650-431, time 5.000 s, sent: 10001 msg/s, received: 10001 msg/s, min/median/75th/95th/99th consumer latency: 161/415/598/1254/3089 µs
id: test-070650-431, sending rate avg: 9998 msg/s
id: test-070650-431, receiving rate avg: 9997 msg/s
id: test-070650-431, consumer latency min/median/75th/95th/99th 155/431/607/1347/3170 µs
"""


def test_the_summary_latency_is_read_in_ms_whatever_perftests_unit() -> None:
    # The summary's line, not the last second's report before it.
    latency = perftest._latency(SUMMARY_LINES)
    assert latency == {"min": 155, "median": 431, "p75": 607, "p95": 1347, "p99": 3170} | {
        "unit": "µs"
    }
    run_ = {"latency": latency}
    assert [report.latency_ms(run_, point) for point in report.POINTS] == [0.431, 1.347, 3.17]
    in_ms = {"latency": {"median": 2, "p95": 5, "p99": 9, "unit": "ms"}}
    assert report.latency_ms(in_ms, "p99") == 9.0
    assert report.latency_ms(run_ | {"error": "boom"}, "p50") is None
    with pytest.raises(ValueError, match="unknown unit 'ns'"):
        report.latency_ms({"latency": {"median": 2, "unit": "ns"}}, "p50")


# -- the arguments and the plan ------------------------------------------------------------------


def test_the_latency_cells_follow_each_scenarios_throughput_cells_lowest_rate_first() -> None:
    args = run.parse_args(
        ["--scenarios", "1,2", "--tools", "perftest,loadgen", "--latency-rates", "50000,10000"]
    )
    assert args.latency_rates == [50_000, 10_000]
    cells = [(scenario.number, tool, rate) for scenario, tool, rate in run.plan(args)]
    assert cells == [
        (1, "perftest", None),
        (1, "loadgen", None),
        (1, "perftest", 10_000),
        (1, "perftest", 50_000),
        (2, "perftest", None),
        (2, "loadgen", None),
        (2, "perftest", 10_000),
        (2, "perftest", 50_000),
    ]
    assert run.plan(run.parse_args(["--scenarios", "1"])) == [
        (scenarios.SCENARIOS[1], "perftest", None),
        (scenarios.SCENARIOS[1], "loadgen", None),
    ]
    alone = run.parse_args(["--scenarios", "1", "--tools", "", "--latency-rates", "10000"])
    assert run.plan(alone) == [(scenarios.SCENARIOS[1], "perftest", 10_000)]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", "above 0 msg/s"),
        ("10000,-5", "above 0 msg/s"),
        ("10k", "not whole msg/s numbers"),
        ("2.5", "not whole msg/s numbers"),
        ("10000,10000", "a rate given twice"),
        (",", "no rate given"),
    ],
)
def test_bad_latency_rates_are_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str], value: str, why: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.parse_args(["--latency-rates", value])
    assert exit_.value.code == 2
    assert why in capsys.readouterr().err


def test_a_rate_that_some_scenario_cannot_split_is_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        run.parse_args(["--scenarios", "1,4", "--latency-rates", "10000,10002"])
    assert "10002 msg/s does not split evenly over scenario 4's 4 producers" in (
        capsys.readouterr().err
    )


# -- held or short -------------------------------------------------------------------------------


def fixed(broker: str, round_index: int, offered: int, **figures: Any) -> dict[str, Any]:
    run_ = {"broker": broker, "scenario": 1, "tool": "perftest", "round": round_index}
    return run_ | {"offered_rate": offered, "expected_consume_rate": offered} | figures


def test_a_run_holds_its_rate_when_it_publishes_and_receives_at_least_95_percent() -> None:
    held = fixed("hutch", 0, 10_000, publish_rate=10_003, consume_rate=9_960)
    assert report.hold_fields(held) == {"held_fraction": 0.996, "held": True}
    # A publisher slowed down by the broker, or consumers behind it: both fall short.
    slowed = fixed("rabbitmq", 0, 10_000, publish_rate=9_400, consume_rate=9_400)
    assert report.hold_fields(slowed) == {"held_fraction": 0.94, "held": False}
    behind = fixed("rabbitmq", 0, 10_000, publish_rate=10_000, consume_rate=8_000)
    assert report.hold_fields(behind) == {"held_fraction": 0.8, "held": False}
    # Scenario 3: three queues per message, so 30,000 received is 10,000 carried.
    fan = fixed("hutch", 0, 10_000, publish_rate=10_000, consume_rate=29_000)
    assert report.hold_fields(fan | {"expected_consume_rate": 30_000})["held_fraction"] == 0.9667
    assert report.hold_fields(fixed("hutch", 0, 10_000, error="boom")) == {}
    assert report.hold_fields({"publish_rate": 1.0, "consume_rate": 1.0}) == {}


# -- the table -----------------------------------------------------------------------------------


def lat(p50: int, p95: int, p99: int) -> dict[str, Any]:
    return {"min": 1, "median": p50, "p75": p50, "p95": p95, "p99": p99, "unit": "µs"}


def document() -> dict[str, Any]:
    def ok(broker: str, r: int, offered: int, pub: int, recv: int, latency: dict[str, Any],
           cpu: float) -> dict[str, Any]:  # fmt: skip
        figures = fixed(broker, r, offered, publish_rate=pub, consume_rate=recv, latency=latency)
        cores = round(recv * cpu / 1e6, 3)  # a core is 1e6 µs of CPU a second
        return figures | {"cpu_us_per_message": cpu, "broker_cores": cores, "load_cores": 0.3}

    runs = [
        # Throughput cells of the same scenario and tool: never mixed with the latency cells.
        {"broker": "rabbitmq", "scenario": 1, "tool": "perftest", "round": 0,
         "publish_rate": 40_000, "consume_rate": 35_000, "latency": lat(900_000, 2e6, 3e6),
         "cpu_us_per_message": 31.0},
        {"broker": "hutch", "scenario": 1, "tool": "perftest", "round": 0,
         "publish_rate": 98_000, "consume_rate": 97_000, "latency": lat(1_500, 30_000, 40_000),
         "cpu_us_per_message": 8.8},
        # 10,000 msg/s: both hold it in both rounds.
        ok("rabbitmq", 0, 10_000, 10_000, 9_990, lat(800, 2_000, 4_000), 20.0),
        ok("hutch", 0, 10_000, 10_000, 10_000, lat(400, 1_000, 800), 10.0),
        ok("hutch", 1, 10_000, 10_000, 9_980, lat(600, 1_200, 2_400), 12.0),
        ok("rabbitmq", 1, 10_000, 10_000, 10_000, lat(1_200, 3_000, 6_000), 30.0),
        # 50,000 msg/s: RabbitMQ carries 80 % of it in round 0; Hutch's round 1 failed.
        ok("rabbitmq", 0, 50_000, 41_000, 40_000, lat(50_000, 200_000, 400_000), 40.0),
        ok("hutch", 0, 50_000, 50_000, 50_000, lat(1_000, 2_000, 4_000), 8.0),
        fixed("hutch", 1, 50_000, error="PerfTest exited 1 without a summary: boom"),
        ok("rabbitmq", 1, 50_000, 50_000, 49_900, lat(2_000, 8_000, 16_000), 20.0),
    ]  # fmt: skip
    return {
        "started_at": "2026-11-29T06:00:00+00:00",
        "arguments": {"duration": 20, "repeat": 2, "latency_rates": [10_000, 50_000]},
        "machine": {"cpus": 2},
        "scenarios": {"1": "1 producer, 1 queue, 1 consumer"},
        "runs": runs,
    }


def table_rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[part.strip() for part in line.strip("|").split("|")] for line in lines]


def test_the_latency_cells_are_keyed_apart_from_the_throughput_cells() -> None:
    runs = document()["runs"]
    assert list(report.group(runs)) == [(1, "perftest")]
    assert [len(side) for side in report.group(runs)[(1, "perftest")].values()] == [1, 1]
    assert list(report.group_fixed_rate(runs)) == [(1, 10_000), (1, 50_000)]
    assert {
        name: len(side) for name, side in report.group_fixed_rate(runs)[(1, 50_000)].items()
    } == {
        "rabbitmq": 2,
        "hutch": 2,
    }


def test_the_throughput_table_is_the_same_with_latency_cells_beside_it() -> None:
    doc = document()
    without = doc | {"runs": [r for r in doc["runs"] if not report.is_fixed_rate(r)]}
    text = report.markdown(doc)
    assert text.startswith(report.markdown(without) + "\n\n" + report.FIXED_RATE_TITLE)
    perftest_row = table_rows(report.markdown(without))[2]
    assert perftest_row[2:4] == ["35,000 (n=1)", "97,000 (n=1)"]


def test_the_table_latency_at_a_fixed_rate_has_every_figure_of_each_cell() -> None:
    text = report.fixed_rate_markdown(document()["runs"], ["rabbitmq", "hutch"])
    assert text.startswith("Latency at a fixed rate: PerfTest publishing the same offered rate")
    header, rule, low, high = table_rows(text)
    assert header == [
        "scenario", "offered msg/s",
        "RabbitMQ pub / recv msg/s (held)", "Hutch pub / recv msg/s (held)",
        "RabbitMQ p50 / p95 / p99 ms", "Hutch p50 / p95 / p99 ms", "Hutch/RabbitMQ p50 / p95 / p99",
        "RabbitMQ CPU µs/msg", "Hutch CPU µs/msg", "Hutch/RabbitMQ CPU/msg",
        "RabbitMQ cores: broker + load", "Hutch cores: broker + load",
    ]  # fmt: skip
    assert rule == ["---"] * len(header)
    # Ratios pair rounds: p99 0.2 and 0.4, median 0.30; not 1.6 / 5.0 of the medians (0.32).
    assert low == [
        "S1", "10,000", "10,000 / 9,995 (100 %, n=2)", "10,000 / 9,990 (100 %, n=2)",
        "1.0 / 2.5 / 5.0", "0.5 / 1.1 / 1.6", "0.50x / 0.45x / 0.30x",
        "25.0 (20.0-30.0)", "11.0 (10.0-12.0)", "0.45x (0.40-0.50)", "0.25 + 0.30", "0.11 + 0.30",
    ]  # fmt: skip
    # RabbitMQ could not carry 50,000 msg/s in round 0: the row says so, with how far it fell.
    assert high == [
        "S1", "50,000", "45,500 / 44,950 (90 %, n=2) SHORT in 1 of 2 (lowest 80 %)",
        "50,000 / 50,000 (100 %, n=1)", "26.0 / 104 / 208", "1.0 / 2.0 / 4.0",
        "0.02x / 0.01x / 0.01x (n=1)", "30.0 (20.0-40.0)", "8.0 (n=1)", "0.20x (n=1)",
        "1.30 + 0.30", "0.40 + 0.30",
    ]  # fmt: skip
    assert text.endswith(
        "Left out: S1 at 50,000 msg/s Hutch: 1 of 2 rounds failed "
        "(PerfTest exited 1 without a summary: boom)."
    )


def test_the_summary_for_the_results_file_holds_both_brokers_and_the_paired_ratios() -> None:
    summary = report.fixed_rate_summary(document()["runs"])
    json.dumps(summary)  # it goes into the results file as it is
    low, high = summary
    assert (low["scenario"], low["offered_rate"], low["expected_consume_rate"]) == (
        1,
        10_000,
        10_000,
    )
    hutch = low["brokers"]["hutch"]
    assert (hutch["rounds"], hutch["failed"], hutch["short_rounds"]) == (2, 0, 0)
    assert hutch["latency_ms"]["p99"] | {"relative_spread": 0} == {
        "n": 2, "median": pytest.approx(1.6), "low": 0.8, "high": 2.4, "relative_spread": 0,
    }  # fmt: skip
    assert low["hutch_over_rabbitmq"]["p99"]["median"] == pytest.approx(0.3)
    assert low["hutch_over_rabbitmq"]["cpu_us_per_message"]["median"] == pytest.approx(0.45)
    rabbitmq = high["brokers"]["rabbitmq"]
    assert rabbitmq["short_rounds"] == 1
    assert (rabbitmq["held_fraction"]["low"], rabbitmq["held_fraction"]["high"]) == (0.8, 0.998)
    assert high["brokers"]["hutch"]["failed"] == 1
    assert high["hutch_over_rabbitmq"]["p50"]["n"] == 1


def test_a_broker_that_failed_every_round_shows_failed_and_one_broker_has_no_ratios() -> None:
    runs = [fixed("hutch", 0, 10_000, error="PerfTest unavailable: no java")]
    runs.append(fixed("rabbitmq", 0, 10_000, publish_rate=10_000, consume_rate=10_000,
                      latency=lat(500, 900, 1_500), cpu_us_per_message=20.0))  # fmt: skip
    header, row = report.fixed_rate_rows(report.fixed_rate_summary(runs), ["rabbitmq", "hutch"])
    assert row[2:4] == ["10,000 / 10,000 (100 %, n=1)", "FAILED (1 of 1)"]
    assert row[4:7] == ["0.5 / 0.9 / 1.5", "-", "-"]
    assert row[-2:] == ["-", "-"]  # RabbitMQ's made-up run has no cores, Hutch failed
    header, row = report.fixed_rate_rows(report.fixed_rate_summary(runs[1:]), ["rabbitmq"])
    assert "Hutch/RabbitMQ CPU/msg" not in header
    assert row == [
        "S1", "10,000", "10,000 / 10,000 (100 %, n=1)", "0.5 / 0.9 / 1.5", "20.0 (n=1)", "-",
    ]  # fmt: skip


def test_a_document_of_latency_cells_only_reports_just_their_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = document()
    doc["runs"] = [r for r in doc["runs"] if report.is_fixed_rate(r)]
    assert report.markdown(doc).startswith(report.FIXED_RATE_TITLE)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    assert run.main(["--report", str(path)]) == 0
    assert "| S1 | 50,000 |" in capsys.readouterr().out


def test_a_bench_run_writes_the_cells_summary_and_prints_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """run.main's wiring, with each broker's runs made up: the cells each round runs come from
    `plan`, and the results file holds the runs and their summary."""
    made = {(r["broker"], r["round"], r.get("offered_rate")): r for r in document()["runs"]}
    asked = []

    def bench_broker(name, args, perftest_lib, round_index=0):  # type: ignore[no-untyped-def]
        cells = run.plan(args)
        asked.append((name, round_index, [(s.number, tool, rate) for s, tool, rate in cells]))
        return {}, [made[(name, round_index, rate)] for _, _, rate in cells]

    monkeypatch.setattr(run, "bench_broker", bench_broker)
    monkeypatch.setattr(run, "prepare_perftest", lambda tools, rates: None)
    monkeypatch.setattr(run, "machine", lambda lib: {"cpus": 2})
    monkeypatch.setattr(run.rabbitmq, "installed", lambda: True)  # made up: no broker starts
    output = tmp_path / "out.json"
    argv = ["--scenarios", "1", "--tools", "", "--latency-rates", "10000,50000", "--repeat", "2"]
    assert run.main([*argv, "--output", str(output)]) == 0
    cells = [(1, "perftest", 10_000), (1, "perftest", 50_000)]
    assert asked == [("rabbitmq", 0, cells), ("hutch", 0, cells), ("hutch", 1, cells),
                     ("rabbitmq", 1, cells)]  # fmt: skip
    written = json.loads(output.read_text())
    assert written["arguments"]["latency_rates"] == [10_000, 50_000]
    assert written["fixed_rate"] == json.loads(
        json.dumps(report.fixed_rate_summary(written["runs"]))
    )
    assert [(c["offered_rate"], sorted(c["brokers"])) for c in written["fixed_rate"]] == [
        (10_000, ["hutch", "rabbitmq"]),
        (50_000, ["hutch", "rabbitmq"]),
    ]
    printed = capsys.readouterr().out
    assert printed.startswith("\n" + report.FIXED_RATE_TITLE)
    assert "SHORT in 1 of 2 (lowest 80 %)" in printed
