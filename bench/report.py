"""The benchmark's outputs: the comparison table on stdout and the JSON file in bench/results/.

Why: a run is read twice, by a person right away (one row per scenario and tool, RabbitMQ and
Hutch side by side with their ratio and peak memory) and later by whoever tracks progress across
commits (every figure, error and version in a timestamped JSON file, git-ignored).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BROKER_TITLES = {"rabbitmq": "RabbitMQ", "hutch": "Hutch"}
_MIB = 1024 * 1024


def table(runs: list[dict[str, Any]], brokers: list[str]) -> str:
    """One row per (scenario, tool); per broker `published/consumed` msgs/s and peak RSS."""
    header = ["scenario", "tool"]
    header += [f"{BROKER_TITLES[name]} msgs/s pub/recv" for name in brokers]
    if {"rabbitmq", "hutch"} <= set(brokers):
        header.append("Hutch/RabbitMQ recv")
    header += [f"RSS {BROKER_TITLES[name]}" for name in brokers]
    rows = [header]
    for scenario, tool in _keys(runs):
        by_broker = {
            run["broker"]: run
            for run in runs
            if run["scenario"] == scenario and run["tool"] == tool
        }
        row = [str(scenario), tool]
        row += [_rates(by_broker.get(name)) for name in brokers]
        if {"rabbitmq", "hutch"} <= set(brokers):
            row.append(_ratio(by_broker.get("hutch"), by_broker.get("rabbitmq")))
        row += [_rss(by_broker.get(name)) for name in brokers]
        rows.append(row)
    return _format(rows) + _footnotes(runs)


def _keys(runs: list[dict[str, Any]]) -> list[tuple[int, str]]:
    seen: dict[tuple[int, str], None] = {}
    for run in runs:
        seen[(run["scenario"], run["tool"])] = None
    return list(seen)


def _ok(run: dict[str, Any] | None) -> bool:
    return run is not None and not run.get("error")


def _rates(run: dict[str, Any] | None) -> str:
    if run is None:
        return "-"
    if run.get("error"):
        return f"FAILED [{run['footnote']}]"
    return f"{run['publish_rate']:,.0f} / {run['consume_rate']:,.0f}"


def _ratio(hutch: dict[str, Any] | None, rabbitmq: dict[str, Any] | None) -> str:
    if not (_ok(hutch) and _ok(rabbitmq)) or not rabbitmq or not rabbitmq["consume_rate"]:
        return "-"
    assert hutch is not None
    return f"{hutch['consume_rate'] / rabbitmq['consume_rate']:.2f}"


def _rss(run: dict[str, Any] | None) -> str:
    if run is None or not run.get("peak_rss_bytes"):
        return "-"
    return f"{run['peak_rss_bytes'] / _MIB:,.0f} MiB"


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
