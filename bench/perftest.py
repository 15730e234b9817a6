"""Drive a broker with RabbitMQ PerfTest, the RabbitMQ team's own Java load generator.

Why: it is the tool RabbitMQ's published figures come from and it is fast (the Java client with
NIO), so it is the fairest outside yardstick for hutch-broker. We run it from the jars that
scripts/fetch-perftest.sh resolves from Maven Central into ~/.cache/hutch/perftest/lib, with the
machine's Java 17, against the topology loadgen has declared (`--predeclared`, no bindings of its
own), and read its closing "sending/receiving rate avg" lines.

One limit: PerfTest publishes a single routing key (`-k`), so in the topic scenario it does not
cycle through 1,000 keys as loadgen does; it uses `Scenario.perftest_routing_key`, which reaches 3
of the 10 queues (3 of the 1,000 bindings), and the consumers of the other 7 queues stay idle.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import proccpu
import scenarios

REPO = Path(__file__).resolve().parents[1]
FETCH_SCRIPT = REPO / "scripts" / "fetch-perftest.sh"
PERFTEST_DIR = Path(os.environ.get("PERFTEST_DIR", Path.home() / ".cache/hutch/perftest"))
MAIN_CLASS = "com.rabbitmq.perf.PerfTest"
JVM_OPTIONS = ["-Xms256m", "-Xmx1g"]
_RATE = re.compile(r"(sending|receiving) rate avg: (\d+) msg/s")
_LATENCY = re.compile(r"consumer latency min/median/75th/95th/99th ([\d/]+) (\S+)$", re.MULTILINE)


class PerfTestError(Exception):
    """PerfTest is unavailable, or a run did not produce its summary."""


@dataclasses.dataclass
class PerfTestResult:
    publish_rate: float
    consume_rate: float
    latency: dict[str, Any]
    output_tail: str
    cpu_seconds: float | None = None  # the JVM's user + system time over its whole run
    wall_seconds: float | None = None


def ensure_installed() -> Path:
    """The lib directory with PerfTest's jars, fetching them once if needed."""
    lib = PERFTEST_DIR / "lib"
    if shutil.which("java") is None:
        raise PerfTestError("java not found (apt-get install -y openjdk-17-jre-headless)")
    if not any(lib.glob("perf-test-*.jar")):
        fetched = subprocess.run(
            ["bash", str(FETCH_SCRIPT)], capture_output=True, text=True, timeout=600, check=False
        )
        if fetched.returncode != 0:
            raise PerfTestError(f"{FETCH_SCRIPT.name} failed: {fetched.stderr.strip()[-500:]}")
    return lib


def version(lib: Path) -> str | None:
    jars = sorted(lib.glob("perf-test-*.jar"))
    return jars[-1].stem.removeprefix("perf-test-") if jars else None


def command(lib: Path, url: str, scenario: scenarios.Scenario, duration: int) -> list[str]:
    """PerfTest arguments equivalent to `scenario` (see bench/scenarios.py)."""
    args = [
        "java",
        *JVM_OPTIONS,
        "-cp",
        f"{lib}/*",
        MAIN_CLASS,
        "--uri",
        url,
        "--producers",
        str(scenario.producers),
        "--size",
        str(scenario.body_size),
        "--qos",
        str(scenario.prefetch),
        "--multi-ack-every",
        str(scenario.ack_every),
        "--time",
        str(duration),
        "--predeclared",
        "--skip-binding-queues",
        "--exchange",
        scenario.exchange,
        "--type",
        scenario.exchange_type,
        "--routing-key",
        scenario.perftest_routing_key or scenario.routing_keys[0],
        *_queue_args(scenario),
    ]
    if scenario.confirms:
        args += ["--confirm", str(scenario.confirm_window)]
    if scenario.persistent:
        args += ["--flag", "persistent"]
    return args


def _queue_args(scenario: scenarios.Scenario) -> list[str]:
    if len(scenario.queues) == 1:
        return ["--queue", scenario.queues[0], "--consumers", str(scenario.consumers)]
    # Consumers spread round-robin over the pattern's queues: consumers_per_queue on each.
    pattern = scenario.queues[0].rstrip("0123456789") + "%d"
    return [
        "--queue-pattern",
        pattern,
        "--queue-pattern-from",
        "0",
        "--queue-pattern-to",
        str(len(scenario.queues) - 1),
        "--consumers",
        str(scenario.consumers),
    ]


def run(lib: Path, url: str, scenario: scenarios.Scenario, duration: int) -> PerfTestResult:
    """Run PerfTest for `duration` seconds (bounded by a timeout) and parse its summary; the
    JVM's CPU seconds come from /proc as it exits (bench/proccpu.py)."""
    try:
        completed = proccpu.run(command(lib, url, scenario, duration), timeout=duration + 60)
    except proccpu.RunTimeoutError as error:
        raise PerfTestError(f"PerfTest did not finish within {duration + 60}s") from error
    output = completed.stdout + completed.stderr
    rates = dict(_RATE.findall(output))
    if "sending" not in rates or "receiving" not in rates:
        raise PerfTestError(
            f"PerfTest exited {completed.returncode} without a summary: {_tail(output)}"
        )
    return PerfTestResult(
        publish_rate=float(rates["sending"]),
        consume_rate=float(rates["receiving"]),
        latency=_latency(output),
        output_tail=_tail(output),
        cpu_seconds=completed.cpu_seconds,
        wall_seconds=completed.wall_seconds,
    )


def _latency(output: str) -> dict[str, Any]:
    match = _LATENCY.search(output)
    if match is None:
        return {}
    values = [int(value) for value in match.group(1).split("/")]
    return dict(zip(("min", "median", "p75", "p95", "p99"), values, strict=False)) | {
        "unit": match.group(2)
    }


def _tail(output: str, lines: int = 8) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])
