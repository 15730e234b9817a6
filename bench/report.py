"""The benchmark's outputs: the comparison table on stdout and the JSON file in bench/results/.

Why: a run is read twice, by a person right away (one row per scenario and tool, RabbitMQ and
Hutch side by side: medians over the rounds with their range, the per-round ratio and peak
memory) and later by whoever tracks progress across
commits (every figure, error and version in a timestamped JSON file, git-ignored).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import rounds

BROKER_TITLES = {"rabbitmq": "RabbitMQ", "hutch": "Hutch", "hutch-base": "Hutch base"}
_MIB = 1024 * 1024


def table(runs: list[dict[str, Any]], brokers: list[str]) -> str:
    """One row per (scenario, tool): per broker the median `published/consumed` msgs/s with the
    range of consumed over the rounds, the median per-round ratio, and the highest peak RSS."""
    header = ["scenario", "tool"]
    header += [f"{BROKER_TITLES[name]} msgs/s pub/recv (recv range, n)" for name in brokers]
    both = {"rabbitmq", "hutch"} <= set(brokers)
    if both:
        header.append("Hutch/RabbitMQ recv (range)")
    against_base = {"hutch-base", "hutch"} <= set(brokers)  # bench/run.py --baseline
    if against_base:
        header += ["Hutch/base recv (range)", "Hutch/base CPU per msg (range)"]
    header += [f"RSS {BROKER_TITLES[name]}" for name in brokers]
    rows = [header]
    grouped = group(runs)
    for key, by_broker in grouped.items():
        row = [str(key[0]), key[1]]
        row += [_rates(by_broker.get(name, [])) for name in brokers]
        if both:
            row.append(_ratio(by_broker.get("hutch", []), by_broker.get("rabbitmq", [])))
        if against_base:
            hutch, base = by_broker.get("hutch", []), by_broker.get("hutch-base", [])
            row.append(_ratio(hutch, base))
            row.append(_ratio(hutch, base, "cpu_us_per_message"))  # below 1: cheaper now
        row += [_rss(by_broker.get(name, [])) for name in brokers]
        rows.append(row)
    return _format(rows) + _footnotes(runs)


def group(runs: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, list[dict[str, Any]]]]:
    """Runs by (scenario, tool), then by broker, in round order."""
    grouped: dict[tuple[int, str], dict[str, list[dict[str, Any]]]] = {}
    for run in sorted(runs, key=lambda r: r.get("round", 0)):
        grouped.setdefault((run["scenario"], run["tool"]), {}).setdefault(run["broker"], [])
        grouped[(run["scenario"], run["tool"])][run["broker"]].append(run)
    return grouped


def paired_ratio(
    hutch: list[dict[str, Any]], rabbitmq: list[dict[str, Any]], field: str = "consume_rate"
) -> rounds.Spread | None:
    """Hutch/RabbitMQ (or any two brokers' runs) per round, over the rounds where both
    measured; None if none did."""
    theirs = {run.get("round", 0): run for run in rabbitmq if _ok(run) and run.get(field)}
    pairs = [
        (run[field], theirs[run.get("round", 0)][field])
        for run in hutch
        if _ok(run) and run.get(field) and run.get("round", 0) in theirs
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
    both = len(brokers) == 2
    cpus = (document.get("machine") or {}).get("cpus")
    titles = [BROKER_TITLES[name] for name in brokers]
    header = ["scenario", "tool"]
    header += [f"{title} recv msg/s" for title in titles]
    if both:
        header.append("Hutch/RabbitMQ recv")
    header += [f"{title} CPU µs/msg" for title in titles]
    if both:
        header.append("Hutch/RabbitMQ CPU/msg")
    of = f" of {cpus}" if cpus else ""
    header += [f"{title} cores{of}: broker + load" for title in titles]
    header += [f"{title} p50 / p99 ms" for title in titles]
    rows = [header]
    failures: list[str] = []
    for (number, tool), by_broker in sorted(group(runs).items()):
        cells = [by_broker.get(name, []) for name in brokers]
        row = [f"S{number}", tool]
        row += [_median_range(side, "consume_rate", "{:,.0f}") for side in cells]
        if both:
            row.append(_x(paired_ratio(cells[1], cells[0])))
        row += [_median_range(side, "cpu_us_per_message", "{:.1f}") for side in cells]
        if both:
            row.append(_x(paired_ratio(cells[1], cells[0], "cpu_us_per_message")))
        row += [_cores(side) for side in cells]
        row += [_latency_cell(side) for side in cells]
        rows.append(row)
        for name, side in zip(brokers, cells, strict=True):
            failed = [run for run in side if not _ok(run)]
            if failed:
                first = failed[0]["error"].splitlines()[0][:160]
                failures.append(
                    f"S{number} {tool} {BROKER_TITLES[name]}: {len(failed)} of {len(side)} "
                    f"rounds failed ({first})"
                )
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.insert(1, "|" + "---|" * len(header))
    titles_by_number = document.get("scenarios") or {}
    notes = [f"S{number}: {title}" for number, title in sorted(titles_by_number.items())]
    text = "\n".join(lines)
    if notes:
        text += "\n\n" + "; ".join(notes) + "."
    if failures:
        text += "\n\nLeft out: " + "; ".join(failures) + "."
    return text


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
