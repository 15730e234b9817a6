"""All three benchmarks, then the report: ``make bench`` in one script.

Why: the report compares figures that only mean something side by side when they come from the
same machine in the same sitting. This runs bench/run.py (broker: Hutch and RabbitMQ 3.10.8),
bench/operator_bench.py (1,000 Queue CRs on the local control plane) and bench/spark_bench.py
(the Spark source on both brokers) one after the other, each writing its JSON into
bench/results/ under one timestamp, then bench/comparison.py writes docs/bench/report.md.
A benchmark that fails is reported and skipped; the report says which section is missing.

    python bench/all.py [--quick] [--skip broker,operator,spark]
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
TIMEOUT = 3600  # seconds per benchmark


def commands(stamp: str, quick: bool) -> dict[str, tuple[list[str], Path]]:
    """Each benchmark's command line and the JSON file it writes."""
    py = sys.executable
    broker, operator, spark = (
        RESULTS / f"{stamp}.json",
        RESULTS / f"operator-{stamp}.json",
        RESULTS / f"spark-{stamp}.json",
    )
    return {
        "broker": (
            [py, str(BENCH / "run.py"), "--output", str(broker)]
            + (["--duration", "8", "--tools", "loadgen"] if quick else []),
            broker,
        ),
        "operator": (
            [py, str(BENCH / "operator_bench.py"), "--json", str(operator)]
            + (["--queues", "200"] if quick else []),
            operator,
        ),
        "spark": (
            [py, str(BENCH / "spark_bench.py"), "--brokers", "hutch,rabbitmq"]
            + ["--output", str(spark)]
            + (["--messages", "10000", "--latency-seconds", "8"] if quick else []),
            spark,
        ),
    }


def run_one(name: str, command: list[str], output: Path) -> bool:
    print(f"==> {name}: {' '.join(command[1:])}", flush=True)
    began = time.monotonic()
    try:
        done = subprocess.run(command, timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        print(f"==> {name}: timed out after {TIMEOUT}s", flush=True)
        return False
    seconds = time.monotonic() - began
    ok = done.returncode == 0 and output.is_file()
    state = "ok" if ok else f"FAILED (exit {done.returncode}, {output.name} missing or stale)"
    print(f"==> {name}: {state} in {seconds:.0f}s", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    parser.add_argument("--skip", default="", help="comma-separated: broker,operator,spark")
    parser.add_argument("--out", type=Path, help="report directory (default docs/bench)")
    args = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    produced: dict[str, Path] = {}
    for name, (command, output) in commands(stamp, args.quick).items():
        if name in skip:
            continue
        if run_one(name, command, output):
            produced[name] = output
    report = [sys.executable, str(BENCH / "comparison.py")]
    for name, path in produced.items():
        report += [f"--{name}", str(path)]
    if args.out:
        report += ["--out", str(args.out)]
    print("==> report", flush=True)
    code = subprocess.run(report, check=False).returncode
    failed = set(commands(stamp, args.quick)) - skip - set(produced)
    if failed:
        print(f"==> missing from this sitting: {', '.join(sorted(failed))}", flush=True)
    return code or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
