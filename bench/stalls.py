"""Which loop stalls hutch-broker has under PerfTest, in CPU, and how deep its queue gets.

Why: at a fixed 10,000 msg/s hutch-broker's p99 was tens of milliseconds against RabbitMQ's
few (docs/bench/report.md, #32). This runs one PerfTest cell (bench/perftest.py's command, at
``--rate`` or unthrottled) against a hutch-broker started under bench/stallprobe.py, which counts
each loop turn's, timer's and gc pass's CPU, and meanwhile polls the queue's depth through the
management API (a backlog, not a stall, is what an unthrottled run's p99 may measure). It prints
one table: per name, how many, how many of 1/2/5/10/20 ms of CPU or more, the largest, the
total; then PerfTest's rates and latency, the queue depth's percentiles, RSS and gc state.

    python bench/stalls.py --rate 10000 --duration 20 [--scenario 1] [--json out.json]
    python bench/stalls.py --rate 0 ...            # unthrottled, as the throughput cell
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import perftest
import run
import scenarios
import stallprobe

PROBE = Path(__file__).resolve().parent / "stallprobe.py"


class ProbedBroker(run.brokers.HutchBroker):
    """hutch-broker from the working tree, started by the probe (its counts in ``out``)."""

    def __init__(self) -> None:
        super().__init__()
        self.out = self.work_dir / "stalls.json"

    def _command(self) -> list[str]:
        command = super()._command()
        if command[1:3] != ["-m", "hutch_broker"]:
            raise run.BenchError(f"unexpected hutch-broker command: {command}")
        return [command[0], str(PROBE), str(self.out), "--", *command[3:]]


def poll_depth(broker: ProbedBroker, queue: str, stop: threading.Event) -> list[int]:
    """The queue's messages (ready + unacked) every 0.5 s until ``stop``."""
    admin = run.management.Management(broker)
    path = f"/queues/%2F/{run.management.quote(queue)}"
    depths = []
    while not stop.wait(0.5):
        reply = admin.get(path)
        if reply.status == 200 and isinstance(reply.body, dict):
            depths.append(int(reply.body.get("messages", 0)))
    return depths


def read_counts(broker: ProbedBroker, newer_than: float) -> dict[str, Any]:
    """The probe's next report written after ``newer_than`` (it writes once a second)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if broker.out.exists() and broker.out.stat().st_mtime > newer_than:
            document: dict[str, Any] = json.loads(broker.out.read_text())
            return document
        time.sleep(0.2)
    raise run.BenchError(f"no report from the probe in {broker.out}")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    scenario = scenarios.SCENARIOS[args.scenario]
    lib = perftest.ensure_installed()
    broker = ProbedBroker()
    broker.start()
    try:
        run.setup_for_perftest(broker.amqp_url, scenario)
        read_counts(broker, 0.0)  # the probe is running
        if broker.pid is not None:  # the counts start here, after start-up and the setup
            os.kill(broker.pid, signal.SIGUSR1)
        stop = threading.Event()
        depths: list[int] = []
        poller = threading.Thread(
            target=lambda: depths.extend(poll_depth(broker, scenario.queues[0], stop))
        )
        poller.start()
        try:
            result = perftest.run(lib, broker.amqp_url, scenario, args.duration, args.rate or None)
        finally:
            stop.set()
            poller.join()
        counts = read_counts(broker, time.time())
    finally:
        broker.stop()
    return {
        "scenario": scenario.number,
        "offered_rate": args.rate or None,
        "duration": args.duration,
        "publish_rate": result.publish_rate,
        "consume_rate": result.consume_rate,
        "latency": result.latency,
        "queue_depth": depths,
        "probe": counts,
    }


def table(measured: dict[str, Any]) -> str:
    probe = measured["probe"]
    thresholds = [str(value) for value in stallprobe.THRESHOLDS_MS]
    lines = [
        f"probe window {probe['seconds']:.1f} s; CPU ms of the loop thread",
        "| name | count | "
        + " | ".join(f">= {t} ms" for t in thresholds)
        + " | max ms | total ms |",
        "|---|---:|" + "---:|" * len(thresholds) + "---:|---:|",
    ]
    for name, entry in probe["names"].items():
        over = " | ".join(str(entry["over_ms"][t]) for t in thresholds)
        lines.append(
            f"| {name} | {entry['count']} | {over} | {entry['max_ms']:.2f} | "
            f"{entry['cpu_ms']:.0f} |"
        )
    latency = measured["latency"]
    depths = measured["queue_depth"] or [0]
    lines += [
        "",
        f"PerfTest: sent {measured['publish_rate']:.0f} msg/s, received "
        f"{measured['consume_rate']:.0f} msg/s, latency {latency}",
        f"queue depth (every 0.5 s, n={len(depths)}): median {statistics.median(depths):.0f}, "
        f"max {max(depths)}",
        f"RSS {probe.get('rss_kib')} KiB; gc {probe.get('gc')}; TCP_NODELAY {probe.get('nodelay')}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000, help="msg/s offered; 0: unthrottled")
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--scenario", type=int, default=1, choices=[1, 2])
    parser.add_argument("--json", type=Path, help="write the whole measurement here")
    args = parser.parse_args(argv)
    measured = measure(args)
    if args.json is not None:
        args.json.write_text(json.dumps(measured, indent=1))
    sys.stdout.write(table(measured) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
