"""The benchmark's outputs: the comparison table on stdout and the JSON file in bench/results/.

Why: a run is read twice, by a person right away (one row per scenario and tool, RabbitMQ and
Hutch side by side: medians over the rounds with their range, the per-round ratio and peak
memory) and later by whoever tracks progress across
commits (every figure, error and version in a timestamped JSON file, git-ignored).

Two kinds of cell: a throughput cell, keyed by (scenario, tool), where the load generator
publishes as fast as it can; and a latency cell (``offered_rate`` in its runs, bench/run.py
``--latency-rates``), keyed by (scenario, offered rate), where PerfTest publishes the same rate
to both brokers. They never share a row: a latency cell's receiving rate is the rate it was
offered, and a throughput cell's latency is a queueing time at each broker's own rate.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rounds

BROKER_TITLES = {"rabbitmq": "RabbitMQ", "hutch": "Hutch", "hutch-base": "Hutch base"}
_MIB = 1024 * 1024


def table(runs: list[dict[str, Any]], brokers: list[str]) -> str:
    """One row per (scenario, tool): per broker the median `published/consumed` msgs/s with the
    range of consumed over the rounds, the median per-round ratio, and the highest peak RSS."""
    columns = [_Column("{broker} msgs/s pub/recv (recv range, n)", _rates)]
    if {"rabbitmq", "hutch"} <= set(brokers):
        columns.append(
            _Column("Hutch/RabbitMQ recv (range)", lambda by: _ratio(*_hutch_and(by, "rabbitmq")))
        )
    if {"hutch-base", "hutch"} <= set(brokers):  # bench/run.py --baseline
        columns.append(
            _Column("Hutch/base recv (range)", lambda by: _ratio(*_hutch_and(by, "hutch-base")))
        )
        columns.append(  # below 1: cheaper now
            _Column(
                "Hutch/base CPU per msg (range)",
                lambda by: _ratio(*_hutch_and(by, "hutch-base"), "cpu_us_per_message"),
            )
        )
    columns.append(_Column("RSS {broker}", _rss))
    rows = [([str(key[0]), key[1]], by_broker) for key, by_broker in group(runs).items()]
    table = _broker_rows(["scenario", "tool"], columns, brokers, rows, _runs_of)
    return _format(table) + _footnotes([run for run in runs if not is_fixed_rate(run)])


def group(runs: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, list[dict[str, Any]]]]:
    """The throughput cells' runs by (scenario, tool), then by broker, in round order; the
    latency cells' runs are `group_fixed_rate`'s."""
    grouped: dict[tuple[int, str], dict[str, list[dict[str, Any]]]] = {}
    for run in sorted(runs, key=lambda r: r.get("round", 0)):
        if is_fixed_rate(run):
            continue
        grouped.setdefault((run["scenario"], run["tool"]), {}).setdefault(run["broker"], [])
        grouped[(run["scenario"], run["tool"])][run["broker"]].append(run)
    return grouped


def is_fixed_rate(run: dict[str, Any]) -> bool:
    """A latency cell's run: PerfTest held to ``offered_rate`` msg/s."""
    return run.get("offered_rate") is not None


def paired_ratio(
    hutch: list[dict[str, Any]], rabbitmq: list[dict[str, Any]], field: str = "consume_rate"
) -> rounds.Spread | None:
    """Hutch/RabbitMQ (or any two brokers' runs) per round, over the rounds where both
    measured; None if none did."""
    return paired_by_round(hutch, rabbitmq, lambda run: run.get(field) if _ok(run) else None)


def paired_by_round(
    hutch: list[dict[str, Any]],
    rabbitmq: list[dict[str, Any]],
    value: Callable[[dict[str, Any]], float | None],
) -> rounds.Spread | None:
    """`paired_ratio` of any figure a run gives (``value``: None or 0 when it gives none)."""
    theirs = {run.get("round", 0): figure for run in rabbitmq if (figure := value(run))}
    pairs = [
        (mine, theirs[run.get("round", 0)])
        for run in hutch
        if (mine := value(run)) and run.get("round", 0) in theirs
    ]
    if not pairs:
        return None
    return rounds.ratios([a for a, _ in pairs], [b for _, b in pairs])


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One broker's rounds of one cell as a single run: medians of the rates and of PerfTest's
    latency percentiles, the highest peak RSS, ``n`` and the rounds' consume range. If every
    round failed, the first failure."""
    good = [run for run in runs if _ok(run)]
    if not good:
        return runs[0] if runs else {}
    merged = dict(good[0])
    consumed = rounds.summarize([run["consume_rate"] for run in good])
    merged["publish_rate"] = rounds.summarize([run["publish_rate"] for run in good]).median
    merged["consume_rate"] = consumed.median
    merged["consume_range"] = [consumed.low, consumed.high]
    merged["n"] = consumed.n
    peaks = [run["peak_rss_bytes"] for run in good if run.get("peak_rss_bytes")]
    merged["peak_rss_bytes"] = max(peaks) if peaks else None
    latencies = [run["latency"] for run in good if run.get("latency")]
    if latencies:
        merged["latency"] = {
            point: rounds.summarize([lat[point] for lat in latencies]).median
            for point in latencies[0]
            if all(isinstance(lat.get(point), int | float) for lat in latencies)
        }
    return merged


def _ok(run: dict[str, Any] | None) -> bool:
    return run is not None and not run.get("error")


def _rates(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return "-"
    good = [run for run in runs if _ok(run)]
    if not good:
        return f"FAILED [{runs[0]['footnote']}]"
    published = rounds.summarize([run["publish_rate"] for run in good])
    consumed = rounds.summarize([run["consume_rate"] for run in good])
    text = f"{published.median:,.0f} / {consumed.median:,.0f}"
    text += f" ({consumed.low:,.0f}-{consumed.high:,.0f}, {consumed.n})"
    failed = [run for run in runs if not _ok(run)]
    return text + (f" {len(failed)} FAILED [{failed[0]['footnote']}]" if failed else "")


def _ratio(
    hutch: list[dict[str, Any]], rabbitmq: list[dict[str, Any]], field: str = "consume_rate"
) -> str:
    spread = paired_ratio(hutch, rabbitmq, field)
    if spread is None:
        return "-"
    return f"{spread.median:.2f} ({spread.low:.2f}-{spread.high:.2f})"


def _rss(runs: list[dict[str, Any]]) -> str:
    peaks = [run["peak_rss_bytes"] for run in runs if run.get("peak_rss_bytes")]
    if not peaks:
        return "-"
    return f"{max(peaks) / _MIB:,.0f} MiB"


def _format(rows: list[list[str]]) -> str:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def _markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.insert(1, "|" + "---|" * len(rows[0]))
    return "\n".join(lines)


_PER_BROKER = "{broker}"  # in a column's heading: one such column per broker, titled with its name


@dataclasses.dataclass(frozen=True)
class _Column:
    """A column of a broker table, or one per broker where `heading` holds `_PER_BROKER`: `cell`
    gives the text of that broker's side of a row, or else of the whole row (a ratio of two
    brokers' sides)."""

    heading: str
    cell: Callable[[Any], str]


def _broker_rows(
    keys: list[str],
    columns: list[_Column],
    brokers: list[str],
    rows: list[tuple[list[str], Any]],
    side: Callable[[Any, str], Any],
) -> list[list[str]]:
    """A table with a column per broker for each figure, header first: `keys`' headings, then
    `columns`'; each of `rows` is its key cells and the whole row, `side(row, broker)` that
    broker's part of it.

    Why: the throughput tables and the latency one (on stdout and in markdown) lay out their
    figures the same way, and one layout keeps a header and its cells from drifting apart.
    """
    titles = [BROKER_TITLES[name] for name in brokers]
    header = list(keys)
    for column in columns:
        per_broker = _PER_BROKER in column.heading
        header += (
            [column.heading.replace(_PER_BROKER, t) for t in titles]
            if per_broker
            else [column.heading]
        )
    table = [header]
    for key, whole in rows:
        row = list(key)
        sides = [side(whole, name) for name in brokers]
        for column in columns:
            per_broker = _PER_BROKER in column.heading
            row += [column.cell(one) for one in sides] if per_broker else [column.cell(whole)]
        table.append(row)
    return table


def _runs_of(by_broker: dict[str, list[dict[str, Any]]], name: str) -> list[dict[str, Any]]:
    """A throughput cell's side: one broker's runs (none where it did not run)."""
    return by_broker.get(name, [])


def _hutch_and(
    by_broker: dict[str, list[dict[str, Any]]], other: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Hutch's runs of a throughput cell and those of the broker it is compared with."""
    return by_broker.get("hutch", []), by_broker.get(other, [])


def _failed_rounds(label: str, name: str, side: list[dict[str, Any]]) -> list[str]:
    """A cell's rounds that failed at one broker, for the markdown tables' "Left out"."""
    failed = [run for run in side if not _ok(run)]
    if not failed:
        return []
    first = failed[0]["error"].splitlines()[0][:160]
    title = BROKER_TITLES.get(name, name)
    return [f"{label} {title}: {len(failed)} of {len(side)} rounds failed ({first})"]


def _left_out(failures: list[str]) -> str:
    return "\n\nLeft out: " + "; ".join(failures) + "." if failures else ""


def _footnotes(runs: list[dict[str, Any]]) -> str:
    notes: dict[int, str] = {}
    for run in runs:
        if run.get("error"):
            notes.setdefault(run["footnote"], run["error"].splitlines()[0][:200])
    return "".join(f"\n[{number}] {text}" for number, text in sorted(notes.items()))


def number_failures(runs: list[dict[str, Any]]) -> None:
    """Give each distinct error a footnote number, shared by the rows that failed alike."""
    numbers: dict[str, int] = {}
    for run in runs:
        if run.get("error"):
            key = run["error"].splitlines()[0]
            run["footnote"] = numbers.setdefault(key, len(numbers) + 1)


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")


# -- the report's markdown table (bench/run.py --report) -----------------------------------------

MARKDOWN_BROKERS = ("rabbitmq", "hutch")


def markdown(document: dict[str, Any]) -> str:
    """The broker table of docs/bench/report.md from one bench/run.py JSON document.

    One row per (scenario, tool): each broker's consumed msg/s, median and range over the
    rounds; Hutch/RabbitMQ paired by round; each broker's CPU µs per consumed message and the
    ratio of those (below 1.00x Hutch spends less); the cores broker and load generator kept
    busy (median over rounds, out of the machine's CPUs), which says how much of the machine
    the load took; PerfTest's consumer latency p50/p99 where it gave them. Failed rounds are
    left out and counted.
    """
    runs = document.get("runs") or []
    if not runs:
        raise ValueError("the document holds no runs")
    brokers = [name for name in MARKDOWN_BROKERS if any(run["broker"] == name for run in runs)]
    if not brokers:
        raise ValueError(f"the document holds runs of neither of {MARKDOWN_BROKERS}")
    sections = []
    if group(runs):
        sections.append(_throughput_markdown(document, brokers))
    if any(is_fixed_rate(run) for run in runs):
        sections.append(fixed_rate_markdown(runs, brokers))
    return "\n\n".join(sections)


def _throughput_markdown(document: dict[str, Any], brokers: list[str]) -> str:
    """`markdown`'s table of the throughput cells."""
    runs = document.get("runs") or []
    both = len(brokers) == 2
    cpus = (document.get("machine") or {}).get("cpus")
    columns = [_Column("{broker} recv msg/s", _received)]
    if both:
        columns.append(_Column("Hutch/RabbitMQ recv", _paired_x))
    columns.append(_Column("{broker} CPU µs/msg", _cpu_per_message))
    if both:
        columns.append(_Column("Hutch/RabbitMQ CPU/msg", _paired_cpu_x))
    of = f" of {cpus}" if cpus else ""
    columns.append(_Column(f"{_PER_BROKER} cores{of}: broker + load", _cores))
    columns.append(_Column("{broker} p50 / p99 ms", _latency_cell))
    grouped = sorted(group(runs).items())
    rows = [([f"S{number}", tool], by_broker) for (number, tool), by_broker in grouped]
    table = _broker_rows(["scenario", "tool"], columns, brokers, rows, _runs_of)
    failures = [
        failure
        for (number, tool), by_broker in grouped
        for name in brokers
        for failure in _failed_rounds(f"S{number} {tool}", name, by_broker.get(name, []))
    ]
    titles_by_number = document.get("scenarios") or {}
    notes = [f"S{number}: {title}" for number, title in sorted(titles_by_number.items())]
    text = _markdown_table(table)
    if notes:
        text += "\n\n" + "; ".join(notes) + "."
    return text + _left_out(failures)


def _received(runs: list[dict[str, Any]]) -> str:
    return _median_range(runs, "consume_rate", "{:,.0f}")


def _cpu_per_message(runs: list[dict[str, Any]]) -> str:
    return _median_range(runs, "cpu_us_per_message", "{:.1f}")


def _paired_x(by_broker: dict[str, list[dict[str, Any]]], field: str = "consume_rate") -> str:
    return _x(paired_ratio(*_hutch_and(by_broker, "rabbitmq"), field))


def _paired_cpu_x(by_broker: dict[str, list[dict[str, Any]]]) -> str:
    return _paired_x(by_broker, "cpu_us_per_message")


def _values(runs: list[dict[str, Any]], field: str) -> list[float]:
    return [run[field] for run in runs if _ok(run) and isinstance(run.get(field), int | float)]


def _median_range(runs: list[dict[str, Any]], field: str, number: str) -> str:
    values = _values(runs, field)
    if not values:
        return "-"
    spread = rounds.summarize(values)
    if spread.n == 1:
        return number.format(spread.median) + " (n=1)"
    low, high = number.format(spread.low), number.format(spread.high)
    return f"{number.format(spread.median)} ({low}-{high})"


def _x(spread: rounds.Spread | None) -> str:
    if spread is None:
        return "-"
    if spread.n == 1:
        return f"{spread.median:.2f}x (n=1)"
    return f"{spread.median:.2f}x ({spread.low:.2f}-{spread.high:.2f})"


def _cores(runs: list[dict[str, Any]]) -> str:
    broker, load = _values(runs, "broker_cores"), _values(runs, "load_cores")
    if not broker and not load:
        return "-"
    shown = [f"{rounds.summarize(v).median:.2f}" if v else "-" for v in (broker, load)]
    return " + ".join(shown)


def _latency_cell(runs: list[dict[str, Any]]) -> str:
    """PerfTest's consumer latency p50 / p99 in ms (its JSON holds µs), medians over rounds."""
    points = []
    for point in ("median", "p99"):
        values = [
            run["latency"][point] / (1000 if run["latency"].get("unit", "µs") == "µs" else 1)
            for run in runs
            if _ok(run) and isinstance((run.get("latency") or {}).get(point), int | float)
        ]
        points.append(rounds.summarize(values).median if values else None)
    if points[0] is None or points[1] is None:
        return "-"
    return f"{_ms(points[0])} / {_ms(points[1])}"


def _ms(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


# -- latency at a fixed rate (bench/run.py --latency-rates) --------------------------------------

HOLD = 0.95  # a run held its offered rate if it carried at least this share of it
POINTS = ("p50", "p95", "p99")
_PERFTEST_POINTS = {"p50": "median", "p95": "p95", "p99": "p99"}
_PER_MS = {"µs": 1000, "us": 1000, "ms": 1}  # PerfTest's units: µs, ms with --use-millis
_FIXED_RATE_FIELDS = (
    "publish_rate",
    "consume_rate",
    "cpu_us_per_message",
    "broker_cores",
    "load_cores",
)


def group_fixed_rate(
    runs: list[dict[str, Any]],
) -> dict[tuple[int, int], dict[str, list[dict[str, Any]]]]:
    """The latency cells' runs by (scenario, offered rate), then by broker, in round order."""
    grouped: dict[tuple[int, int], dict[str, list[dict[str, Any]]]] = {}
    for run in sorted(runs, key=lambda r: r.get("round", 0)):
        if is_fixed_rate(run):
            key = (run["scenario"], run["offered_rate"])
            grouped.setdefault(key, {}).setdefault(run["broker"], []).append(run)
    return grouped


def hold_fields(run: dict[str, Any]) -> dict[str, Any]:
    """How much of its offered rate a latency cell's run carried.

    ``held_fraction`` is the lower of published / offered and received / expected (the offered
    rate times the queues each message reaches, ``expected_consume_rate``): a broker that cannot
    keep up shows in one of the two, its publisher slowed down (flow control, a full socket) or
    its consumers behind. ``held``: that fraction is HOLD or more. Empty for a failed run or one
    that is not a latency cell's.
    """
    offered = run.get("offered_rate")
    expected = run.get("expected_consume_rate") or offered
    published, received = run.get("publish_rate"), run.get("consume_rate")
    if not _ok(run) or not offered or published is None or received is None:
        return {}
    fraction = min(published / offered, received / expected)
    return {"held_fraction": round(fraction, 4), "held": fraction >= HOLD}


def latency_ms(run: dict[str, Any], point: str) -> float | None:
    """PerfTest's consumer latency of a run at ``point`` (p50, p95 or p99) in ms; None if the
    run failed or gave none."""
    latency = run.get("latency") or {}
    value = latency.get(_PERFTEST_POINTS[point])
    if not _ok(run) or not isinstance(value, int | float):
        return None
    unit = latency.get("unit", "µs")
    if unit not in _PER_MS:
        raise ValueError(f"PerfTest latency in unknown unit {unit!r}")
    return value / _PER_MS[unit]


def fixed_rate_summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every latency cell's figures for the results file, one entry per (scenario, offered
    rate): per broker the median, range and n (`rounds.Spread`) of the published and received
    rates, the share of the offered rate held and the rounds that fell short, the latency
    percentiles in ms, the CPU per message and the cores; and Hutch/RabbitMQ of the
    percentiles and of the CPU per message, paired by round."""
    cells = []
    for (number, offered), by_broker in sorted(group_fixed_rate(runs).items()):
        first = next(iter(by_broker.values()))[0]
        cell: dict[str, Any] = {
            "scenario": number,
            "offered_rate": offered,
            "expected_consume_rate": first.get("expected_consume_rate", offered),
            "brokers": {name: _fixed_rate_figures(side) for name, side in by_broker.items()},
        }
        hutch, rabbitmq = by_broker.get("hutch"), by_broker.get("rabbitmq")
        if hutch and rabbitmq:
            ratios: dict[str, Any] = {}
            for point in POINTS:
                spread = paired_by_round(hutch, rabbitmq, lambda run, p=point: latency_ms(run, p))
                if spread is not None:
                    ratios[point] = spread.as_dict()
            cpu = paired_ratio(hutch, rabbitmq, "cpu_us_per_message")
            if cpu is not None:
                ratios["cpu_us_per_message"] = cpu.as_dict()
            cell["hutch_over_rabbitmq"] = ratios
        cells.append(cell)
    return cells


def _fixed_rate_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [run for run in runs if _ok(run)]
    figures: dict[str, Any] = {"rounds": len(runs), "failed": len(runs) - len(good)}
    for field in _FIXED_RATE_FIELDS:
        values = _values(good, field)
        if values:
            figures[field] = rounds.summarize(values).as_dict()
    holds = [hold for run in good if (hold := hold_fields(run))]
    if holds:
        figures["held_fraction"] = rounds.summarize([h["held_fraction"] for h in holds]).as_dict()
        figures["short_rounds"] = sum(1 for hold in holds if not hold["held"])
    latency = {}
    for point in POINTS:
        values = [value for run in good if (value := latency_ms(run, point)) is not None]
        if values:
            latency[point] = rounds.summarize(values).as_dict()
    if latency:
        figures["latency_ms"] = latency
    return figures


def fixed_rate_rows(summary: list[dict[str, Any]], brokers: list[str]) -> list[list[str]]:
    """The table "latency at a fixed rate", header first: one row per (scenario, offered rate)
    with each broker's achieved rates and the share of the offered rate it held, its latency
    p50 / p95 / p99 and CPU per message, and Hutch/RabbitMQ of both where both ran; then the
    cores broker and load generator kept busy, which tell a broker at its limit from a starved
    load generator or machine when a cell falls SHORT."""
    both = {"rabbitmq", "hutch"} <= set(brokers)
    columns = [_Column("{broker} pub / recv msg/s (held)", _achieved)]
    columns.append(_Column("{broker} p50 / p95 / p99 ms", _percentiles))
    if both:
        columns.append(_Column("Hutch/RabbitMQ p50 / p95 / p99", _ratios))
    columns.append(_Column("{broker} CPU µs/msg", _cpu_spread))
    if both:
        columns.append(_Column("Hutch/RabbitMQ CPU/msg", _cpu_ratio))
    columns.append(_Column("{broker} cores: broker + load", _cores_of))
    rows = [([f"S{cell['scenario']}", f"{cell['offered_rate']:,}"], cell) for cell in summary]
    keys = ["scenario", "offered msg/s"]
    return _broker_rows(keys, columns, brokers, rows, _figures_of)


def _figures_of(cell: dict[str, Any], name: str) -> dict[str, Any] | None:
    """A latency cell's side: one broker's figures (None where it did not run)."""
    figures: dict[str, Any] | None = cell["brokers"].get(name)
    return figures


def _cpu_spread(figures: dict[str, Any] | None) -> str:
    return _spread_text((figures or {}).get("cpu_us_per_message"), "{:.1f}")


def _cpu_ratio(cell: dict[str, Any]) -> str:
    cpu = (cell.get("hutch_over_rabbitmq") or {}).get("cpu_us_per_message")
    return _x(rounds.Spread(**_fields(cpu))) if cpu else "-"


def _fields(spread: dict[str, Any]) -> dict[str, Any]:
    return {key: spread[key] for key in ("n", "median", "low", "high")}


def _achieved(figures: dict[str, Any] | None) -> str:
    """``50,000 / 49,990 (100 %, n=3)``, with ``SHORT in k of n (lowest x %)`` when a round
    carried less than HOLD of its offered rate; ``FAILED`` when no round measured."""
    if not figures:
        return "-"
    if "consume_rate" not in figures or "publish_rate" not in figures:
        return f"FAILED ({figures['failed']} of {figures['rounds']})"
    text = f"{figures['publish_rate']['median']:,.0f} / {figures['consume_rate']['median']:,.0f}"
    held = figures.get("held_fraction")
    if held is None:
        return text
    text += f" ({held['median'] * 100:.0f} %, n={held['n']})"
    if figures.get("short_rounds"):
        text += (
            f" SHORT in {figures['short_rounds']} of {held['n']} (lowest {held['low'] * 100:.0f} %)"
        )
    return text


def _cores_of(figures: dict[str, Any] | None) -> str:
    broker, load = ((figures or {}).get(field) for field in ("broker_cores", "load_cores"))
    if not broker and not load:
        return "-"
    return " + ".join(f"{spread['median']:.2f}" if spread else "-" for spread in (broker, load))


def _percentiles(figures: dict[str, Any] | None) -> str:
    latency = (figures or {}).get("latency_ms") or {}
    if not all(point in latency for point in POINTS):
        return "-"
    return " / ".join(_ms(latency[point]["median"]) for point in POINTS)


def _ratios(cell: dict[str, Any]) -> str:
    ratios = cell.get("hutch_over_rabbitmq") or {}
    if not all(point in ratios for point in POINTS):
        return "-"
    text = " / ".join(f"{ratios[point]['median']:.2f}x" for point in POINTS)
    return text + (" (n=1)" if ratios[POINTS[0]]["n"] == 1 else "")


def _spread_text(spread: dict[str, Any] | None, number: str) -> str:
    if not spread:
        return "-"
    if spread["n"] == 1:
        return number.format(spread["median"]) + " (n=1)"
    low, high = number.format(spread["low"]), number.format(spread["high"])
    return f"{number.format(spread['median'])} ({low}-{high})"


def _fixed_rate_failures(runs: list[dict[str, Any]]) -> list[str]:
    return [
        failure
        for (number, offered), by_broker in sorted(group_fixed_rate(runs).items())
        for name, side in by_broker.items()
        for failure in _failed_rounds(f"S{number} at {offered:,} msg/s", name, side)
    ]


FIXED_RATE_TITLE = (
    "Latency at a fixed rate: PerfTest publishing the same offered rate (`--rate`) to both brokers"
)
FIXED_RATE_NOTE = (
    "held: the lower of published / offered and received / expected, median over the rounds; "
    f"SHORT: rounds that carried less than {HOLD:.0%} of it. Latency: PerfTest's consumer "
    "latency, medians over the rounds; ratios paired by round (below 1.00x Hutch is faster or "
    "spends less)."
)


def fixed_rate_table(runs: list[dict[str, Any]], brokers: list[str]) -> str:
    """The latency cells as bench/run.py prints them, under a title and with their notes."""
    summary = fixed_rate_summary(runs)
    failures = _fixed_rate_failures(runs)
    text = f"{FIXED_RATE_TITLE}\n\n{_format(fixed_rate_rows(summary, brokers))}"
    text += f"\n{FIXED_RATE_NOTE}"
    return text + "".join(f"\nLeft out: {failure}" for failure in failures)


def fixed_rate_markdown(runs: list[dict[str, Any]], brokers: list[str]) -> str:
    """`fixed_rate_table` in markdown, for `markdown` and docs/bench/report.md."""
    rows = fixed_rate_rows(fixed_rate_summary(runs), brokers)
    text = f"{FIXED_RATE_TITLE}:\n\n{_markdown_table(rows)}\n\n{FIXED_RATE_NOTE}"
    return text + _left_out(_fixed_rate_failures(runs))


def context(document: dict[str, Any]) -> str:
    """When and how the table's runs were measured, and how busy the machine was meanwhile."""
    arguments = document.get("arguments") or {}
    started = document.get("started_at", "?")
    text = f"Measured from {started}"
    if document.get("total_seconds"):
        text += f" for {document['total_seconds'] / 60:.0f} min"
    text += (
        f": {arguments.get('repeat', '?')} interleaved rounds of {arguments.get('duration', '?')} s"
        " per cell, broker order alternating"
    )
    commit = (document.get("machine") or {}).get("git_commit")
    if commit:
        text += f", commit {commit[:7]}"
    cpus = (document.get("machine") or {}).get("cpus")
    return text + ". Machine: " + rounds.busiest(document.get("runs") or [], cpus) + "."
