"""Repeated, interleaved measurement: the run order, the summaries and the machine's load.

Why: one measurement per broker is noise on a shared 2-core machine. The first broker measured
pays for warm-ups (the JVM's JIT in Spark and PerfTest, the page cache, CPU frequency) and a
neighbour's burst lands on whichever broker happened to run then, so a single run's ratio can
flip with the order. The benchmarks therefore measure in rounds, alternating which broker goes
first (AB, BA, AB, ...), and report the median with its spread, and the Hutch/RabbitMQ ratio as
the median of the per-round ratios with their range. Each sample records the load average and
the runnable process count at its start, so a reader can tell a quiet run from a busy one.

Pure apart from ``load()`` and ``write_results()``; bench/run.py and the Spark benchmarks share
it, and tests/bench/test_rounds.py pins it.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


def orders(names: Sequence[str], repetitions: int) -> list[list[str]]:
    """The broker order of each round: as given in even rounds, reversed in odd ones."""
    if repetitions < 1:
        raise ValueError(f"repetitions must be at least 1, not {repetitions}")
    forward = list(names)
    return [forward if index % 2 == 0 else forward[::-1] for index in range(repetitions)]


@dataclass(frozen=True)
class Spread:
    """The median of n samples with their lowest and highest value."""

    n: int
    median: float
    low: float
    high: float

    @property
    def relative(self) -> float:
        """(high - low) / median: 0.10 means the samples lie within 10 % of the median."""
        return (self.high - self.low) / self.median if self.median else 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"relative_spread": round(self.relative, 4)}

    def text(self, unit: str = "", digits: int = 0) -> str:
        """``72,300 msg/s (68,100-75,000, n=3)``; a single sample has no range."""
        shown = f"{self.median:,.{digits}f}{unit}"
        if self.n == 1:
            return f"{shown} (n=1)"
        return f"{shown} ({self.low:,.{digits}f}-{self.high:,.{digits}f}, n={self.n})"


def summarize(values: Sequence[float]) -> Spread:
    """Median and range of the samples; at least one sample is required."""
    if not values:
        raise ValueError("no samples to summarize")
    return Spread(len(values), statistics.median(values), min(values), max(values))


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> Spread:
    """The per-round ratios a[i] / b[i], summarized.

    Pairing by round rather than dividing the two medians keeps a slow round (a neighbour's
    burst) from being compared with a fast one of the other broker.
    """
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} samples against {len(denominators)}: not paired")
    pairs = [a / b for a, b in zip(numerators, denominators, strict=True) if b]
    return summarize(pairs)


def load(proc: Path = Path("/proc")) -> dict[str, Any]:
    """The machine's load right now: 1/5/15-minute load average and runnable processes."""
    one, five, fifteen = os.getloadavg()
    running = None
    try:
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("procs_running "):
                running = int(line.split()[1]) - 1  # not counting this reader
    except OSError:
        running = None
    return {"loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)], "procs_running": running}


def busiest(samples: Sequence[dict[str, Any]], cpus: int | None = None) -> str:
    """How busy the machine was as the samples started: load average and runnable processes.

    The load average includes the benchmark's own work just before, so it is read next to
    ``procs_running``, which counts other runnable processes at the start of each sample.
    """
    loads = [s["load"]["loadavg"][0] for s in samples if s.get("load")]
    if not loads:
        return "machine load not recorded"
    running = [s["load"]["procs_running"] for s in samples if s.get("load")]
    running = [r for r in running if r is not None]
    cpus = cpus or os.cpu_count() or 1
    text = f"1-min load average {min(loads):.2f}-{max(loads):.2f} on {cpus} CPUs"
    if running:
        text += f", other runnable processes at sample start {min(running)}-{max(running)}"
    return text


def write_results(results: dict[str, Any], output: Path | None, prefix: str) -> Path:
    """Writes ``results`` as JSON to ``output``, else to bench/results/<prefix>-<UTC stamp>.json
    (where bench/comparison.py looks), prints the path and returns it."""
    if output is None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        output = Path(__file__).resolve().parent / "results" / f"{prefix}-{stamp}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2))
    print(f"results: {output}")
    return output
