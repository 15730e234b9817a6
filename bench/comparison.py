"""The benchmark report: Hutch next to RabbitMQ 3.10.8, figure by figure, as Markdown and PNGs.

Why: the three benchmarks (bench/run.py for the broker, bench/spark_bench.py for the Spark
source, bench/operator_bench.py for the operator) each write a JSON file into bench/results/,
which is git-ignored and read by machines. This script turns the newest of each into one
committed page, docs/bench/report.md, with charts (matplotlib, Agg) and the machine described,
so the README can link it and quote its headline ratios. A missing or failed benchmark leaves
its section saying so; it never stops the report.

    python bench/comparison.py [--broker F.json] [--spark F.json] [--operator F.json]
                               [--stream-pods F.json ...] [--out docs/bench]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import machineinfo
import matplotlib as mpl
import matplotlib.ticker
import report
import rounds
import stream_pods_report
import stream_summary

mpl.use("Agg")
import matplotlib.pyplot as plt  # after choosing the headless backend

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
OUT = REPO / "docs" / "bench"
COLORS = {"rabbitmq": "#f28e2b", "hutch": "#4e79a7"}
TITLES = {"rabbitmq": "RabbitMQ 3.10.8", "hutch": "Hutch"}
MIB = 2**20


# --- inputs -------------------------------------------------------------------------------------


def newest(pattern: str, accept: Callable[[dict[str, Any]], bool]) -> Path | None:
    """The newest results file matching ``pattern`` whose content ``accept`` takes."""
    for path in sorted(RESULTS.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            if accept(json.loads(path.read_text())):
                return path
        except (OSError, ValueError):
            continue
    return None


def complete_broker_run(doc: dict[str, Any]) -> bool:
    """A bench/run.py file with both brokers up and every run measured."""
    brokers = doc.get("brokers") or {}
    runs = doc.get("runs") or []
    return (
        {"rabbitmq", "hutch"} <= set(brokers)
        and not any("error" in b for b in brokers.values())
        and bool(runs)
        and not any(r.get("error") for r in runs)
    )


def pick_inputs(args: argparse.Namespace) -> dict[str, Path | None]:
    return {
        "broker": args.broker
        or newest("2*.json", complete_broker_run)
        or newest("2*.json", lambda d: "runs" in d),
        "spark": args.spark or newest("spark-*.json", lambda d: "hutch" in d),
        "spark_node": args.spark_node or newest("spark-node-*.json", lambda d: "summary" in d),
        "operator": args.operator or newest("operator-*.json", lambda d: "queues" in d),
        # stream-pods-*.json match the pattern too: only stream_bench.py's files compare with Kafka
        "stream": args.stream
        or newest("stream-*.json", lambda d: "hutch_over_kafka" in d.get("summary", {})),
    }


def pick_stream_pods(given: list[Path] | None) -> list[Path]:
    """The files given (the first one's executor CPU is the table's reference), else the newest
    stream_pods_bench.py file."""
    if given:
        return given
    found = newest("stream-pods-*.json", lambda d: "ratio_2_over_1" in d.get("summary", {}))
    return [] if found is None else [found]


def machine() -> dict[str, str]:
    """The machine this report was written on (the benchmarks ran on it too, via bench/all.py)."""
    facts = {
        "CPUs (nproc)": str(os.cpu_count()),
        "CPU model": machineinfo.this_cpu_model() or platform.processor() or "unknown",
        "Memory": f"{_meminfo_kib('MemTotal') / 2**20:.1f} GiB",
        "Kernel": platform.release(),
        "OS": _os_release() or platform.platform(),
        "Python": platform.python_version(),
        "Load average (1/5/15 min) at report time": " / ".join(f"{v:.2f}" for v in os.getloadavg()),
    }
    java = _first_line(["java", "-version"])
    if java:
        facts["Java"] = java
    commit = _first_line(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    if commit:
        facts["Git commit"] = commit
    return facts


def _meminfo_kib(key: str) -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return float(line.split()[1])
    except OSError:
        return 0.0
    return 0.0


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        return None
    return None


def _first_line(command: list[str]) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if done.returncode == 0 and text else None


# --- small formatting helpers --------------------------------------------------------------------


def ratio(hutch: float | None, rabbitmq: float | None) -> float | None:
    if not hutch or not rabbitmq:
        return None
    return hutch / rabbitmq


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def grouped_bars(
    path: Path,
    labels: list[str],
    series: dict[str, list[float | None]],
    *,
    title: str,
    ylabel: str,
    log: bool = False,
    annotate: list[str] | None = None,
) -> None:
    """One group per label, one bar per broker (RabbitMQ first), optional text over groups."""
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(labels) + 2), 4.4), dpi=110)
    width = 0.8 / max(len(series), 1)
    for index, (name, values) in enumerate(series.items()):
        xs = [i + (index - (len(series) - 1) / 2) * width for i in range(len(labels))]
        heights = [v if v is not None else 0 for v in values]
        ax.bar(xs, heights, width, label=TITLES.get(name, name), color=COLORS.get(name))
    if annotate:
        top = max((v or 0) for values in series.values() for v in values) or 1
        for i, text in enumerate(annotate):
            ax.text(i, top * (1.12 if not log else 1.5), text, ha="center", fontsize=9)
        ax.set_ylim(top=top * (1.3 if not log else 4))
    ax.set_xticks(range(len(labels)), labels)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
    if not log and max((v or 0) for values in series.values() for v in values) >= 1000:
        ax.yaxis.set_major_formatter(mpl.ticker.StrMethodFormatter("{x:,.0f}"))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(series), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


# --- sections ----------------------------------------------------------------------------------


def broker_section(doc: dict[str, Any] | None, out: Path, headline: list[str]) -> list[str]:
    lines = ["## Broker: hutch-broker vs RabbitMQ 3.10.8 (bench/run.py)", ""]
    if doc is None:
        return [*lines, "No bench/run.py results found: run `python bench/run.py`.", ""]
    grouped = report.group(doc["runs"])
    by_key = {
        key: {broker: report.median_run(runs) for broker, runs in pair.items()}
        for key, pair in grouped.items()
    }
    keys = sorted(by_key)
    labels, recv_ratios, cpu_ratios = [], [], []
    for scenario, tool in keys:
        hutch_runs = grouped[(scenario, tool)].get("hutch", [])
        rabbit_runs = grouped[(scenario, tool)].get("rabbitmq", [])
        spread = report.paired_ratio(hutch_runs, rabbit_runs)
        recv_ratios.append(spread.median if spread else None)
        cpu = report.paired_ratio(hutch_runs, rabbit_runs, "cpu_us_per_message")
        cpu_ratios.append(cpu.median if cpu else None)
        labels.append(f"S{scenario} {tool}")
    # The table is bench/run.py --report's, so the page and the command print the same figures.
    lines += [report.markdown(doc), "", report.context(doc), ""]
    lines += _rss_rows(by_key, keys)
    series = {
        b: [by_key[k].get(b, {}).get("consume_rate") for k in keys] for b in ("rabbitmq", "hutch")
    }
    grouped_bars(
        out / "broker-throughput.png", labels, series, title="Messages consumed per second",
        ylabel="msg/s", annotate=[fmt_ratio(r) for r in recv_ratios],
    )  # fmt: skip
    rss = {
        b: [(by_key[k].get(b, {}).get("peak_rss_bytes") or 0) / MIB for k in keys]
        for b in ("rabbitmq", "hutch")
    }
    grouped_bars(out / "broker-memory.png", labels, rss, title="Peak RSS", ylabel="MiB")
    lines += ["", "![throughput](broker-throughput.png)", "", "![memory](broker-memory.png)", ""]
    lines += _latency(by_key, keys, out)
    lines += _broker_facts(doc)
    mean = geomean([r for r in recv_ratios if r])
    rss_ratio = geomean(
        [ratio(h, r) or 0 for h, r in zip(rss["hutch"], rss["rabbitmq"], strict=True)]
    )
    if mean:
        headline.append(
            f"Broker throughput: Hutch consumes {fmt_ratio(mean)} RabbitMQ's rate (geometric "
            f"mean over {len(recv_ratios)} scenario x tool runs; range "
            f"{fmt_ratio(min(r for r in recv_ratios if r))}-"
            f"{fmt_ratio(max(r for r in recv_ratios if r))})"
        )
    cpu_mean = geomean([r for r in cpu_ratios if r])
    if cpu_mean:
        headline.append(
            f"Broker CPU per message: Hutch spends {fmt_ratio(cpu_mean)} RabbitMQ's (geometric "
            f"mean over the same runs; range {fmt_ratio(min(r for r in cpu_ratios if r))}-"
            f"{fmt_ratio(max(r for r in cpu_ratios if r))})"
        )
    if rss_ratio:
        headline.append(f"Broker peak memory: Hutch uses {fmt_ratio(rss_ratio)} RabbitMQ's RSS")
    return lines


def _rss_rows(
    by_key: dict[tuple[int, str], dict[str, dict[str, Any]]], keys: list[tuple[int, str]]
) -> list[str]:
    """Peak RSS per cell, the highest over the rounds, RabbitMQ's beside Hutch's."""
    rows = [
        [f"S{scenario}", tool]
        + [_mib(by_key[(scenario, tool)].get(b, {}).get("peak_rss_bytes")) for b in COLORS]
        for scenario, tool in keys
    ]
    header = ["scenario", "tool"] + [f"{TITLES[b]} peak RSS" for b in COLORS]
    return table(header, rows)


def _spread(stats: dict[str, Any], digits: int = 0) -> str:
    """A summary from bench/rounds.py as ``median (low-high)``."""
    fields = {k: stats[k] for k in ("n", "median", "low", "high")}
    return rounds.Spread(**fields).text(digits=digits)


def _mib(value: float | None) -> str:
    return "-" if not value else f"{value / MIB:,.0f} MiB"


def _latency(
    by_key: dict[tuple[int, str], dict[str, dict[str, Any]]],
    keys: list[tuple[int, str]],
    out: Path,
) -> list[str]:
    """PerfTest's consumer latency percentiles (µs in the JSON), where both brokers have them."""
    perf = [k for k in keys if all(by_key[k].get(b, {}).get("latency") for b in COLORS)]
    if not perf:
        return []
    rows, series = [], {f"{b} {p}": [] for b in ("rabbitmq", "hutch") for p in ("median", "p95")}
    for key in perf:
        cells = [f"S{key[0]}"]
        for broker in ("rabbitmq", "hutch"):
            latency = by_key[key][broker]["latency"]
            for point in ("median", "p95", "p99"):
                cells.append(f"{latency[point] / 1000:,.1f}")
            for point in ("median", "p95"):
                series[f"{broker} {point}"].append(latency[point] / 1000)
        rows.append(cells)
    labels = [f"S{k[0]}" for k in perf]
    fig_series = {"rabbitmq": series["rabbitmq median"], "hutch": series["hutch median"]}
    grouped_bars(
        out / "broker-latency.png", labels, fig_series, log=True,
        title="PerfTest consumer latency, median (log scale)", ylabel="ms",
    )  # fmt: skip
    header = ["scenario"] + [
        f"{TITLES[b]} {p} ms" for b in ("rabbitmq", "hutch") for p in ("p50", "p95", "p99")
    ]
    return [
        "PerfTest consumer latency (publish to delivery, as PerfTest measures it under load):",
        "",
        *table(header, rows),
        "",
        "![latency](broker-latency.png)",
        "",
    ]


def _broker_facts(doc: dict[str, Any]) -> list[str]:
    brokers = doc.get("brokers") or {}
    rows = [
        [
            TITLES.get(name, name),
            str(info.get("version", "-")),
            f"{info.get('start_seconds', '-')}",
            _mib(info.get("idle_rss_bytes")),
        ]
        for name, info in brokers.items()
    ]
    args = doc.get("arguments") or {}
    return [
        f"Each run publishes for {args.get('duration', '?')} s; brokers run one after the other "
        f"on loopback, in {args.get('repeat', 1)} round(s) whose order alternates; each cell is "
        "the median of its rounds and the ratio the median of the per-round ratios. "
        "Scenarios, tools and the CPU columns: [bench/README.md](../../bench/README.md).",
        "",
        *table(["broker", "version", "start-up s", "idle RSS"], rows),
        "",
    ]


def spark_section(doc: dict[str, Any] | None, out: Path, headline: list[str]) -> list[str]:
    lines = ["## Spark source: the `hutch` data source on each broker (bench/spark_bench.py)", ""]
    if doc is None:
        return [*lines, "No bench/spark_bench.py results found.", ""]
    brokers = [b for b in ("rabbitmq", "hutch") if b in doc]
    rows = []
    for broker in brokers:
        item = doc[broker]
        stats = item.get("summary")
        if stats:  # repeated rounds: medians with their range
            rows.append(
                [
                    TITLES[broker],
                    _spread(stats["plain_rate"]),
                    _spread(stats["source_rate"]),
                    _spread(stats["source_over_plain"], digits=2),
                    _spread(stats["latency_p50_ms"]),
                    _spread(stats["latency_p95_ms"]),
                ]
            )
            continue
        lat = item.get("latency") or {}
        rows.append(
            [
                TITLES[broker],
                f"{item['plain_rate']:,.0f}",
                f"{item['source']['rate']:,.0f}",
                f"{item['source']['rate'] / item['plain_rate']:.2f}",
                f"{lat.get('p50_ms', 0):,.0f}",
                f"{lat.get('p95_ms', 0):,.0f}",
            ]
        )
    lines += table(
        ["broker", "plain pika consumer msg/s", "Spark source msg/s", "source/plain",
         "latency p50 ms", "latency p95 ms"],
        rows,
    )  # fmt: skip
    labels = ["plain consumer", "Spark source"]
    series = {b: [doc[b]["plain_rate"], doc[b]["source"]["rate"]] for b in brokers}
    grouped_bars(
        out / "spark-throughput.png", labels, series, title="Spark: messages per second",
        ylabel="msg/s",
    )  # fmt: skip
    lat_series = {
        b: [doc[b]["latency"].get("p50_ms"), doc[b]["latency"].get("p95_ms")] for b in brokers
    }
    grouped_bars(
        out / "spark-latency.png", ["p50", "p95"], lat_series,
        title="Spark: publish to foreachBatch latency (200 ms trigger)", ylabel="ms",
    )  # fmt: skip
    load = doc.get("machine_load", "load not recorded")
    method = (
        f" Median (range) of {doc['repeat']} rounds after a discarded warm-up, broker order "
        f"alternating; ratios paired by round. Machine: {load}."
        if doc.get("repeat")
        else " One run per broker (no warm-up, no repetition): read with care."
    )
    lines += [
        "",
        f"{doc.get('messages', '?')} messages of {doc.get('body_bytes', '?')} bytes per "
        "throughput run; latency at a steady publish rate with a 200 ms trigger." + method,
        "",
        "![spark throughput](spark-throughput.png)",
        "",
        "![spark latency](spark-latency.png)",
        "",
    ]
    cross = doc.get("hutch_over_rabbitmq_source")
    if cross:
        headline.append(
            f"Spark source throughput: {cross['median']:.2f}x on Hutch vs RabbitMQ "
            f"(per-round range {cross['low']:.2f}-{cross['high']:.2f}, n={cross['n']})"
        )
    elif {"hutch", "rabbitmq"} <= set(brokers):
        r = ratio(doc["hutch"]["source"]["rate"], doc["rabbitmq"]["source"]["rate"])
        headline.append(f"Spark source throughput: {fmt_ratio(r)} on Hutch vs RabbitMQ (one run)")
    return lines


def spark_node_section(doc: dict[str, Any] | None) -> list[str]:
    """The same phases with the driver in a Pod on the real node (bench/spark_node_bench.py)."""
    title = "### The same with the driver in a Pod on the real node (bench/spark_node_bench.py)"
    if doc is None:
        return [title, "", "No bench/spark_node_bench.py results found.", ""]
    stats = doc["summary"]
    row = [
        "Hutch, driver Pod",
        _spread(stats["plain_rate"]),
        _spread(stats["source_rate"]),
        _spread(stats["source_over_plain"], digits=2),
        _spread(stats["latency_p50_ms"]),
        _spread(stats["latency_p95_ms"]),
    ]
    lines = [title, ""]
    lines += table(
        ["broker", "plain pika consumer msg/s", "Spark source msg/s", "source/plain",
         "latency p50 ms", "latency p95 ms"],
        [row],
    )  # fmt: skip
    pods = "; ".join(doc.get("pods", [])) or "not recorded"
    lines += [
        "",
        f"The driver (and the plain consumer and publisher) in Pod `spark-bench-driver`, two "
        f"executor Pods, the Broker Pod of examples/broker.yaml reached through its Service; "
        f"{doc.get('messages', '?')} messages per throughput run in "
        f"{doc.get('partitions', '?')} source partition(s), median (range) of "
        f"{doc.get('repeat', '?')} rounds after a discarded warm-up in the same Spark session. "
        f"Machine: {doc.get('machine_load', 'load not recorded')}. Pods: {pods}.",
        "",
    ]
    return lines


def stream_section(doc: dict[str, Any] | None, headline: list[str]) -> list[str]:
    """The stream source against Spark's Kafka source on a local Kafka (bench/stream_bench.py)."""
    title = "## Stream source: Hutch streams vs Spark's Kafka source (bench/stream_bench.py)"
    if doc is None:
        return [title, "", "No bench/stream_bench.py results found.", ""]
    summary = doc["summary"]
    args = doc.get("args", {})
    header, rows = stream_summary.markdown_rows(summary)
    lines = [title, "", *table(header, rows), ""]
    scaling = summary.get("hutch_scaling")
    if scaling:
        lines += [
            f"Hutch batch read with numPartitions {args.get('partitions', '?')} over 1, per round: "
            f"{_spread(scaling, digits=2)} (two task threads in one local[2] JVM, not executor "
            "Pods).",
            "",
        ]
    lines += [
        f"{args.get('messages', '?')} messages of {args.get('body_size', '?')} bytes per read, "
        f"{args.get('partitions', '?')} partitions (Hutch: one stream in that many slices; "
        f"Kafka: a topic with that many), Spark {doc.get('pyspark', '?')} in local[2] with "
        f"spark-sql-kafka-0-10 {doc.get('spark_sql_kafka', '?')}, Kafka {doc.get('kafka', '?')} "
        f"(KRaft, one node). Median (range) of {args.get('repeat', '?')} rounds after a "
        "discarded warm-up, order alternating; ratios paired by round (for rates above 1.00 "
        "favours Hutch, for latency and CPU below 1.00 does). Machine: "
        f"{doc.get('machine_load', 'load not recorded')}.",
        "",
    ]
    ratio = summary["hutch_over_kafka"].get("batch_rate")
    if ratio:
        headline.append(
            f"Stream source vs Spark's Kafka source, batch read: {ratio['median']:.2f}x "
            f"(per-round range {ratio['low']:.2f}-{ratio['high']:.2f}, n={ratio['n']})"
        )
    return lines


def stream_pods_section(docs: list[dict[str, Any]]) -> list[str]:
    """Issue 28's scaling figure, 1 against 2 executor Pods (bench/stream_pods_bench.py)."""
    title = (
        "## Stream source with executor Pods on the real node: 1 against 2 executors "
        "(bench/stream_pods_bench.py)"
    )
    if not docs:
        return [title, "", "No bench/stream_pods_bench.py results found.", ""]
    machines = "; ".join(doc.get("machine_load", "load not recorded") for doc in docs)
    return [
        title,
        "",
        *stream_pods_report.markdown(docs),
        "",
        "Rates are the messages over the query's own time (first batch's start to last batch's "
        "end); CPU is each Pod's cgroup `cpuacct.usage` over that window, medians of the rounds, "
        f"in seconds per million messages. Machine: {machines}.",
        "",
    ]


OPERATOR_FIGURES = {
    "queues": "Queue CRs created at once",
    "create_seconds": "seconds to create them (16 POSTs in flight)",
    "seconds_until_all_ready": "seconds until all Ready (from the first POST)",
    "crs_per_second": "CRs Ready per second",
    "k8s_writes_per_cr": "Kubernetes writes per CR (create)",
    "broker_requests_per_cr": "broker requests per CR",
    "operator_peak_rss_mb": "operator peak RSS (MB)",
    "restart_settle_seconds": "restart: seconds until every CR handled",
    "restart_k8s_writes_per_cr": "restart: Kubernetes writes per CR",
    "restart_broker_requests": "restart: broker requests (all CRs)",
}


def operator_section(doc: dict[str, Any] | None, out: Path, headline: list[str]) -> list[str]:
    count = f"{doc['queues']:,}" if doc and "queues" in doc else "many"
    lines = [f"## Operator: {count} Queue CRs, then a restart (bench/operator_bench.py)", ""]
    if doc is None:
        return [*lines, "No bench/operator_bench.py results found.", ""]
    lines.append(
        "Hutch only: the reference has no operator here. Targets (issue 5): all Ready within "
        "10 s, RSS at most 250 MB, no broker writes on restart."
    )
    lines.append("")
    rows = [[label, f"{doc[key]:,}"] for key, label in OPERATOR_FIGURES.items() if key in doc]
    cpu = doc.get("cpu_seconds_create_phase") or {}
    if cpu:
        rows.append(["CPU seconds while creating", ", ".join(f"{k} {v}" for k, v in cpu.items())])
    if "admission_finalizer" in doc:
        rows.append(["finalizer added at admission", "yes" if doc["admission_finalizer"] else "no"])
    lines += table(["figure", "value"], rows)
    figures = {
        "all Ready": doc.get("seconds_until_all_ready"),
        "restart settled": doc.get("restart_settle_seconds"),
    }
    grouped_bars(
        out / "operator.png", list(figures), {"hutch": list(figures.values())},
        title=f"Operator with {doc.get('queues', '?')} Queue CRs", ylabel="seconds",
    )  # fmt: skip
    lines += ["", "![operator](operator.png)", ""]
    if doc.get("seconds_until_all_ready"):
        headline.append(
            f"Operator: {doc.get('queues')} Queues Ready in "
            f"{doc['seconds_until_all_ready']:.1f} s, peak RSS {doc.get('operator_peak_rss_mb')} MB"
        )
    return lines


def render(
    inputs: dict[str, Path | None], out: Path, pods: Sequence[Path] = ()
) -> tuple[str, list[str]]:
    docs = {k: json.loads(p.read_text()) if p else None for k, p in inputs.items()}
    headline: list[str] = []
    body = broker_section(docs["broker"], out, headline)
    body += spark_section(docs["spark"], out, headline)
    body += spark_node_section(docs["spark_node"])
    body += stream_section(docs["stream"], headline)
    body += stream_pods_section([json.loads(path.read_text()) for path in pods])
    body += operator_section(docs["operator"], out, headline)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = [
        "# Hutch benchmark report",
        "",
        f"Written {stamp} by `python bench/comparison.py` (run all three benchmarks and this "
        "report with `python bench/all.py`). Ratios are Hutch / RabbitMQ 3.10.8 on the same "
        "machine; above 1.00x Hutch is faster (or, for memory, uses more). Figures vary by 10-20 % "
        "from run to run on a shared 2-core machine, more when other work runs beside them.",
        "",
        "## Headline",
        "",
        *[f"- {line}" for line in headline or ["no results yet"]],
        "",
        "## Machine",
        "",
        *table(["", ""], [[k, v] for k, v in machine().items()]),
        "",
        "Inputs: "
        + ", ".join(
            [f"`{_shown(p)}` ({k})" for k, p in inputs.items()]
            + [f"`{_shown(p)}` (stream_pods)" for p in pods]
        ),
        "",
    ]
    return "\n".join(head + body), headline


def _shown(path: Path | None) -> str:
    if path is None:
        return "-"
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", type=Path, help="bench/run.py JSON (default: newest complete)")
    parser.add_argument("--spark", type=Path, help="bench/spark_bench.py JSON (default: newest)")
    parser.add_argument(
        "--spark-node", type=Path, help="bench/spark_node_bench.py JSON (default: newest)"
    )
    parser.add_argument("--operator", type=Path, help="operator_bench.py JSON (default: newest)")
    parser.add_argument("--stream", type=Path, help="stream_bench.py JSON (default: newest)")
    parser.add_argument(
        "--stream-pods", type=Path, nargs="+",
        help="stream_pods_bench.py JSON files, one table (default: the newest)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT, help="output directory (docs/bench)")
    args = parser.parse_args(argv)
    inputs = {k: (p.resolve() if p else None) for k, p in pick_inputs(args).items()}
    pods = [p.resolve() for p in pick_stream_pods(args.stream_pods)]
    text, headline = render(inputs, args.out, pods)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(text)
    print(f"wrote {args.out / 'report.md'}")
    for line in headline:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
