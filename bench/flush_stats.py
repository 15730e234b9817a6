"""What a flush hands the socket on one loop and on vhost workers: pieces, bytes, buffering.

Why: docs/bench/profile.md found the workers' extra CPU per message in the socket write
(``writelines`` in ``AMQPConnection.flush``) with no more system calls per message. This runs
a bench scenario on hutch-broker once per worker count, with bench/flushhook/ counting each
flush from inside the broker's processes (the product unchanged, its flush wrapped at start),
and reports per consumed message and per flush: flushes, frames and bytes, the share of
flushes that found uvloop's buffer holding unsent bytes (so the call copies instead of
writing) or left some there, the bytes-per-flush histogram, and the CPU (the thread's own
clock) and wall time inside flush and inside its ``writelines`` call alone, with the call's
split into user and system time.

    python bench/flush_stats.py [--scenario 5] [--duration 15] [--vhost-workers 0,2]
                                [--rounds 2] [--json out.json]

Rounds interleave the worker counts (0, 2, 0, 2, ...). The counting costs about a
microsecond a flush in every form alike: compare the forms, not these rates with the bench's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import run
import scenarios

HOOK = Path(__file__).resolve().parent / "flushhook"


def read_counts(folder: Path) -> tuple[Counter[str], Counter[str]]:
    """Every process's counts so far, summed: (counters, bytes-per-flush buckets)."""
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for path in folder.glob("flush-*.json"):
        snapshot = json.loads(path.read_text())
        counts.update(snapshot["counts"])
        sizes.update(snapshot["sizes"])
    return counts, sizes


def summary(counts: Counter[str], sizes: Counter[str], consumed: int) -> dict[str, Any]:
    """Per consumed message and per flush, from the window's counters (pure)."""
    flushes = counts["flushes"]
    if not flushes or not consumed:
        raise run.BenchError(f"nothing to summarize: {flushes} flushes, {consumed} consumed")
    writes = counts["writes"] or 1
    per_message = 1000 * consumed  # ns per message -> µs per message
    return {
        "flushes_per_message": round(flushes / consumed, 4),
        "frames_per_flush": round(counts["frames"] / flushes, 2),
        "bytes_per_flush": round(counts["bytes"] / flushes),
        "buffered_before_share": round(counts["buffered_before"] / flushes, 3),
        "buffered_after_share": round(counts["buffered_after"] / flushes, 3),
        # A flush's CPU covers the join of its frames, the write and the next slice's
        # deliveries when a consumer's slice had stopped them (flush resumes them).
        "flush_cpu_us_per_message": round(counts["flush_cpu_ns"] / per_message, 3),
        "flush_wall_us_per_message": round(counts["flush_wall_ns"] / per_message, 3),
        "write_cpu_us_per_message": round(counts["write_cpu_ns"] / per_message, 3),
        "write_wall_us_per_message": round(counts["write_wall_ns"] / per_message, 3),
        "write_user_share": round(
            counts["write_user_us"] / max(1, counts["write_user_us"] + counts["write_sys_us"]), 2
        ),
        "write_cpu_us_per_call": round(counts["write_cpu_ns"] / writes / 1000, 1),
        "bytes_per_flush_buckets": {k: sizes[k] for k in sorted(sizes, key=int) if sizes[k]},
    }


def one_run(scenario: scenarios.Scenario, duration: int, vhost_workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hutch-flush-") as tmp:
        folder = Path(tmp)
        saved = {key: os.environ.get(key) for key in ("HUTCH_FLUSH_STATS", "PYTHONPATH")}
        os.environ["HUTCH_FLUSH_STATS"] = str(folder)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK), saved["PYTHONPATH"]]))
        broker = run.make_broker("hutch", None, None, vhost_workers)
        try:
            broker.start()
        finally:  # the load generator runs without the hook
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        try:
            if vhost_workers:
                run.wait_for_workers(broker, vhost_workers, timeout=60)
            run.create_vhosts(broker, scenario, vhost_workers)
            time.sleep(1.0)  # every process has written its file once
            before = read_counts(folder)
            result = run.run_loadgen(broker.amqp_url, scenario, duration)
            time.sleep(1.0)
            after = read_counts(folder)
        finally:
            broker.stop()
    consumed = int(result.get("consumed", 0))
    return {
        "scenario": scenario.number,
        "vhost_workers": vhost_workers,
        "consumed_per_s": round(result.get("consume_rate", 0)),
        **summary(after[0] - before[0], after[1] - before[1], consumed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", type=int, default=5)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--vhost-workers", type=run.worker_counts, default=[0, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.scenario not in scenarios.SCENARIOS:
        parser.error(f"unknown scenario {args.scenario}; known: {sorted(scenarios.SCENARIOS)}")
    workers = args.vhost_workers
    runs = []
    for round_index in range(args.rounds):
        for count in workers:
            result = one_run(scenarios.SCENARIOS[args.scenario], args.duration, count)
            result["round"] = round_index
            print(json.dumps(result), flush=True)
            runs.append(result)
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
