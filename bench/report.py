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
