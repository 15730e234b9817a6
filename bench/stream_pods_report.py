"""The table of docs/bench/report.md's executor-Pod section, from bench/stream_pods_bench.py's
results files.

Why: that section compares runs of several files (workloads, executor quotas), and its table
was typed from them by hand; a figure copied wrong, or left from an older run, would go
unnoticed. This turns the files into the table, so the report's figures are regenerated from
the JSON, as bench/run.py --report does for the broker's.

The first file's executor CPU is the reference quota: each file adds a read-rate row (named
after its workload, and after its quota when it differs), and the files at the reference quota
give the CPU rows, one figure per file in the order given.

    python bench/stream_pods_report.py RESULTS.json [MORE.json ...]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import rounds

HEADER = ["figure", "1 executor", "2 executors", "2 over 1 (paired by round)"]
COUNTS = (1, 2)


def size(count: int) -> str:
    """1000000 -> ``1 M``, 250000 -> ``250 k``: the report's way of naming a workload."""
    if count % 1_000_000 == 0:
        return f"{count // 1_000_000} M"
    if count % 1_000 == 0:
        return f"{count // 1_000} k"
    return f"{count:,}"


def argument(doc: dict[str, Any], name: str) -> str:
    """One of the bench's arguments as recorded (the bench writes them all as strings)."""
    return str(doc["arguments"][name])


def spread(item: dict[str, Any], unit: str = "", digits: int = 0) -> str:
    fields = {key: item[key] for key in ("n", "median", "low", "high")}
    return rounds.Spread(**fields).text(unit, digits)


def span(values: Sequence[float]) -> str:
    """``0.60-0.68``, or one figure when both ends show the same."""
    if not values:
        return "-"
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low}-{high}"


def rate_row(doc: dict[str, Any], reference_cpu: str) -> list[str]:
    summary = doc["summary"]
    label = (
        f"read rate, {size(int(argument(doc, 'messages')))} messages, "
        f"{size(int(argument(doc, 'max_per_trigger')))} a batch"
    )
    cpu = argument(doc, "executor_cpu")
    if cpu != reference_cpu:
        label += f", executors at {cpu} CPU"
    rates = [
        spread(summary[str(n)]["rate"], " msg/s") if str(n) in summary else "-" for n in COUNTS
    ]
    ratio = summary.get("ratio_2_over_1")
    paired = "-"
    if ratio:
        paired = (
            f"**{ratio['median']:.2f}x** ({ratio['low']:.2f}-{ratio['high']:.2f}, n={ratio['n']})"
        )
    return [label, *rates, paired]


def cpu_per_million(docs: Sequence[dict[str, Any]], role: str, executors: int) -> str:
    """``6.4 / 17.5 s per M msg``: the role's median CPU per million messages, file by file."""
    shown = []
    for doc in docs:
        item = doc["summary"].get(str(executors), {}).get("cpu_s_per_million", {}).get(role)
        shown.append("-" if item is None else f"{item['median']:.1f}")
    return f"{' / '.join(shown)} s per M msg"


def per_round(
    docs: Sequence[dict[str, Any]], executors: int, value: Callable[[dict[str, Any]], Any]
) -> list[float]:
    """``value`` of every round with ``executors`` executors in ``docs`` (None: not recorded)."""
    found = [value(run) for doc in docs for run in doc["runs"] if run["executors"] == executors]
    return [item for item in found if item is not None]


def executor_cpu_per_s(run: dict[str, Any]) -> float | None:
    """The executors' CPU per second of the read window (their CPU per message x the rate)."""
    per_million = run["cpu_s_per_million"].get("executor")
    return None if per_million is None else per_million * run["rows"] / 1e6 / run["seconds"]


def cpu_rows(docs: Sequence[dict[str, Any]], quota: float) -> list[list[str]]:
    workloads = " / ".join(size(int(argument(doc, "messages"))) for doc in docs)
    rows = []
    for role, name in (("executor", "executors'"), ("driver", "driver's"), ("broker", "broker's")):
        rows.append(
            [f"{name} CPU, {workloads}", *(cpu_per_million(docs, role, n) for n in COUNTS), ""]
        )
        if role == "executor":
            rows.append(
                [
                    "executors' CPU per second of reading",
                    *(
                        f"{span(per_round(docs, n, executor_cpu_per_s))} (quota {quota * n:g})"
                        for n in COUNTS
                    ),
                    "",
                ]
            )
        if role == "driver":
            rows.append(
                [
                    "driver's CPU per second, reading / idle after",
                    *(
                        f"{span(per_round(docs, n, lambda r: r['driver_cpu_per_s_reading']))} / "
                        f"{span(per_round(docs, n, lambda r: r['driver_cpu_per_s_idle']))}"
                        for n in COUNTS
                    ),
                    "",
                ]
            )
    return rows


def table_rows(docs: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The read-rate row of every file, then the CPU rows of those at the first file's quota."""
    if not docs:
        raise ValueError("no bench/stream_pods_bench.py results given")
    reference = argument(docs[0], "executor_cpu")
    rows = [rate_row(doc, reference) for doc in docs]
    at_reference = [doc for doc in docs if argument(doc, "executor_cpu") == reference]
    return rows + cpu_rows(at_reference, float(reference))


def markdown(docs: Sequence[dict[str, Any]]) -> list[str]:
    rows = [HEADER, *table_rows(docs)]
    lines = [_line(rows[0]), "|" + "---|" * len(rows[0])]
    return lines + [_line(row) for row in rows[1:]]


def _line(cells: Sequence[str]) -> str:
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        docs = [json.loads(Path(name).read_text()) for name in argv]
        print("\n".join(markdown(docs)))
    except (OSError, ValueError, KeyError) as error:
        print(f"stream_pods_report: cannot read the results: {error!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
