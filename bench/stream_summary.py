"""The stream benchmark's figures: per-system medians, Hutch/Kafka ratios, the printed table.

Why a module of its own: bench/stream_bench.py produces the samples (and needs Spark, Java and
the brokers), bench/comparison.py renders the newest results file into docs/bench/report.md;
both read the samples the same way through these pure functions, pinned by
tests/bench/test_stream_bench.py.
"""

from __future__ import annotations

from typing import Any

import rounds

TITLES = {"hutch": "Hutch stream source", "kafka": "Spark Kafka source"}
METRICS = {
    "plain_rate": ("plain client, no Spark", " msg/s", 0),
    "batch_rate": ("batch read", " msg/s", 0),
    "available_now_rate": ("availableNow read", " msg/s", 0),
    "latency_p50_ms": ("latency p50", " ms", 0),
    "latency_p95_ms": ("latency p95", " ms", 0),
    "batch_cpu_s_per_million": ("broker CPU, batch read", " s/M msg", 1),
    "batch_rate_1_partition": ("batch read, numPartitions 1", " msg/s", 0),
    "prime_s": ("priming read (untimed, first of a round)", " s", 2),
}


def flatten(sample: dict[str, Any]) -> dict[str, float]:
    """The figures of one sample that `summarize` compares, by metric name."""
    flat: dict[str, float] = {}
    if "plain_rate" in sample:
        flat["plain_rate"] = sample["plain_rate"]
    if "batch" in sample:
        flat["batch_rate"] = sample["batch"]["rate"]
        cpu = sample["batch"].get("broker_cpu_seconds")
        if cpu is not None:
            flat["batch_cpu_s_per_million"] = cpu / sample["messages"] * 1e6
    if "available_now" in sample:
        flat["available_now_rate"] = sample["available_now"]["rate"]
    if "latency" in sample:
        flat["latency_p50_ms"] = sample["latency"]["p50_ms"]
        flat["latency_p95_ms"] = sample["latency"]["p95_ms"]
    if "batch_1_partition" in sample:
        flat["batch_rate_1_partition"] = sample["batch_1_partition"]["rate"]
    if "prime_seconds" in sample:
        flat["prime_s"] = sample["prime_seconds"]
    return flat


def summarize(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per system and metric the median and range; Hutch/Kafka as the median of per-round
    ratios (only rounds where both have the metric); Hutch's scaling, 2 over 1 partition."""
    flat = {system: [flatten(s) for s in rows] for system, rows in samples.items()}
    out: dict[str, Any] = {"systems": {}, "hutch_over_kafka": {}}
    for system, rows in flat.items():
        names = [name for name in METRICS if any(name in row for row in rows)]
        out["systems"][system] = {
            name: rounds.summarize([row[name] for row in rows if name in row]).as_dict()
            for name in names
        }
    hutch, kafka = flat.get("hutch", []), flat.get("kafka", [])
    for name in METRICS:
        pairs = [(h[name], k[name]) for h, k in zip(hutch, kafka, strict=False)
                 if name in h and name in k]  # fmt: skip
        if pairs:
            out["hutch_over_kafka"][name] = rounds.ratios(
                [a for a, _ in pairs], [b for _, b in pairs]
            ).as_dict()
    scaled = [(h["batch_rate"], h["batch_rate_1_partition"]) for h in hutch
              if "batch_rate_1_partition" in h and "batch_rate" in h]  # fmt: skip
    if scaled:
        out["hutch_scaling"] = rounds.ratios(
            [a for a, _ in scaled], [b for _, b in scaled]
        ).as_dict()
    return out


def _spread(stats: dict[str, Any], unit: str = "", digits: int = 0) -> str:
    spread = rounds.Spread(**{key: stats[key] for key in ("n", "median", "low", "high")})
    return spread.text(unit, digits)


def report_lines(summary: dict[str, Any], partitions: int = 2) -> list[str]:
    """The table: one row per metric, a column per system, and the Hutch/Kafka ratio.

    For rates a ratio above 1 favours Hutch; for latency, CPU and seconds, below 1 does."""
    systems = list(summary["systems"])
    header = ["metric", *systems]
    if "hutch" in systems and "kafka" in systems:
        header.append("Hutch/Kafka (per round)")
    rows = [header]
    for name, (label, unit, digits) in METRICS.items():
        cells = [summary["systems"][s].get(name) for s in systems]
        if not any(cells):
            continue
        row = [label, *(_spread(c, unit, digits) if c else "-" for c in cells)]
        if len(header) > len(systems) + 1:
            ratio = summary["hutch_over_kafka"].get(name)
            row.append(_spread(ratio, "", 2) if ratio else "-")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             for row in rows]  # fmt: skip
    scaling = summary.get("hutch_scaling")
    if scaling:
        lines.append(
            f"Hutch batch read, numPartitions {partitions} / 1 on local[2], per round: "
            f"{_spread(scaling, '', 2)}"
        )
    return [line.rstrip() for line in lines]


def markdown_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The same table as `report_lines`, as a header and rows for a Markdown table."""
    systems = list(summary["systems"])
    header = ["figure", *(TITLES.get(s, s) for s in systems)]
    both = "hutch" in systems and "kafka" in systems
    if both:
        header.append("Hutch/Kafka (per round)")
    rows = []
    for name, (label, unit, digits) in METRICS.items():
        cells = [summary["systems"][s].get(name) for s in systems]
        if not any(cells):
            continue
        row = [label, *(_spread(c, unit, digits) if c else "-" for c in cells)]
        if both:
            ratio = summary["hutch_over_kafka"].get(name)
            row.append(_spread(ratio, "", 2) if ratio else "-")
        rows.append(row)
    return header, rows
