"""Drive a broker with RabbitMQ PerfTest, the RabbitMQ team's own Java load generator.

Why: it is the tool RabbitMQ's published figures come from and it is fast (the Java client with
NIO), so it is the fairest outside yardstick for hutch-broker. We run it from the jars that
scripts/fetch-perftest.sh resolves from Maven Central into ~/.cache/hutch/perftest/lib, with the
machine's Java 17, against the topology loadgen has declared (`--predeclared`, no bindings of its
own), and read its closing "sending/receiving rate avg" lines.

One limit: PerfTest publishes a single routing key (`-k`), so in the topic scenario it does not
cycle through 1,000 keys as loadgen does; it uses `Scenario.perftest_routing_key`, which reaches 3
of the 10 queues (3 of the 1,000 bindings), and the consumers of the other 7 queues stay idle.

The pairs scenarios (4 and 5) use PerfTest's own queue pattern: with as many producers and
consumers as queues, it gives each queue one producer (publishing to it by name on the default
exchange) and one consumer, so one JVM drives the 4 independent pairs as loadgen's one process
does. A PerfTest instance has one URI, hence one vhost: with the pairs split over vhosts, one
instance runs per vhost, side by side, and their rates and CPU are added up.

A latency cell (bench/run.py ``--latency-rates``) runs the same command with ``--rate``:
PerfTest's limit is per producer, so the offered rate (all producers together, the same on both
brokers) is split evenly over the scenario's producers. Its consumer latency is then the time a
message takes at that load, not the queueing time of a broker driven as fast as it goes.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
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
    instances: list[dict[str, float]] | None = None  # each instance's rates, when several ran


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


def commands(
    lib: Path,
    url: str,
    scenario: scenarios.Scenario,
    duration: int,
    offered_rate: int | None = None,
) -> list[list[str]]:
    """The PerfTest instances to run side by side for `scenario`: one, or one per vhost;
    ``offered_rate``, msg/s published by all producers together (None: as fast as they go)."""
    rate = None if offered_rate is None else producer_rate(scenario, offered_rate)
    if not scenario.vhosts:
        return [command(lib, url, scenario, duration, rate=rate)]
    return [
        command(lib, in_vhost(url, vhost), scenario, duration, queues=indices, rate=rate)
        for vhost, indices in _indices_by_vhost(scenario).items()
    ]


def producer_rate(scenario: scenarios.Scenario, offered_rate: int) -> int:
    """Each producer's share of ``offered_rate`` (PerfTest's ``--rate`` is per producer).

    A rate that does not split evenly is refused rather than rounded: the two brokers would
    still get the same load, but not the one the table names.
    """
    if offered_rate <= 0:
        raise PerfTestError(f"offered rate {offered_rate}: must be above 0 msg/s")
    share, left = divmod(offered_rate, scenario.producers)
    if left:
        raise PerfTestError(
            f"offered rate {offered_rate} msg/s does not split evenly over scenario "
            f"{scenario.number}'s {scenario.producers} producers"
        )
    return share


def fan_out(scenario: scenarios.Scenario) -> int:
    """How many queues one of PerfTest's messages reaches: the consumed rate to expect is the
    published rate times this (3 in scenario 3, whose one routing key reaches 3 queues)."""
    if scenario.pairs or not scenario.bindings:
        return 1
    key = scenario.perftest_routing_key or scenario.routing_keys[0]
    return len(
        {queue for queue, pattern in scenario.bindings if scenarios.topic_matches(pattern, key)}
    )


def _indices_by_vhost(scenario: scenarios.Scenario) -> dict[str, list[int]]:
    placed: dict[str, list[int]] = {}
    for index in range(len(scenario.queues)):
        placed.setdefault(scenario.vhost_of(index) or "/", []).append(index)
    return placed


def in_vhost(url: str, vhost: str) -> str:
    """``url`` with its path naming ``vhost`` (percent-encoded, "/" too)."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(path="/" + urllib.parse.quote(vhost, safe="")).geturl()


def command(
    lib: Path,
    url: str,
    scenario: scenarios.Scenario,
    duration: int,
    *,
    queues: list[int] | None = None,
    rate: int | None = None,
) -> list[str]:
    """PerfTest arguments equivalent to `scenario` (see bench/scenarios.py); ``queues``, a
    pairs scenario's queue indices this instance drives (default: all); ``rate``, each
    producer's msg/s (``--rate``; default: no limit)."""
    indices = list(range(len(scenario.queues))) if queues is None else queues
    producers = len(indices) if scenario.pairs else scenario.producers
    args = [
        "java",
        *JVM_OPTIONS,
        "-cp",
        f"{lib}/*",
        MAIN_CLASS,
        "--uri",
        url,
        "--producers",
        str(producers),
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
        *_routing_args(scenario),
        *_queue_args(scenario, indices),
    ]
    if scenario.confirms:
        args += ["--confirm", str(scenario.confirm_window)]
    if scenario.persistent:
        args += ["--flag", "persistent"]
    if rate is not None:
        args += ["--rate", str(rate)]
    return args


def _routing_args(scenario: scenarios.Scenario) -> list[str]:
    if scenario.pairs:
        return []  # each producer publishes to its queue, by name
    return ["--routing-key", scenario.perftest_routing_key or scenario.routing_keys[0]]


def _queue_args(scenario: scenarios.Scenario, indices: list[int]) -> list[str]:
    consumers = scenario.consumers_per_queue * len(indices)
    if len(scenario.queues) == 1:
        return ["--queue", scenario.queues[0], "--consumers", str(consumers)]
    # Consumers spread round-robin over the pattern's queues: consumers_per_queue on each.
    pattern = scenario.queues[0].rstrip("0123456789") + "%d"
    if [scenario.queues[index] for index in indices] != [pattern % index for index in indices]:
        raise PerfTestError(f"scenario {scenario.number}: queues not named by {pattern!r}")
    return [
        "--queue-pattern",
        pattern,
        "--queue-pattern-from",
        str(indices[0]),
        "--queue-pattern-to",
        str(indices[-1]),
        "--consumers",
        str(consumers),
    ]


def run(
    lib: Path,
    url: str,
    scenario: scenarios.Scenario,
    duration: int,
    offered_rate: int | None = None,
) -> PerfTestResult:
    """Run PerfTest for `duration` seconds (bounded by a timeout) and parse its summary; the
    JVM's CPU seconds come from /proc as it exits (bench/proccpu.py). Several instances (one
    per vhost) run at once: their rates and CPU add up, the wall time is the longest, the
    latency is each percentile's worst. ``offered_rate`` caps the producers (see `commands`)."""
    runs = commands(lib, url, scenario, duration, offered_rate)
    with ThreadPoolExecutor(len(runs)) as pool:
        results = list(pool.map(lambda args: _run_one(args, duration), runs))
    if len(results) == 1:
        return results[0]
    cpu = [result.cpu_seconds for result in results]
    return PerfTestResult(
        publish_rate=sum(result.publish_rate for result in results),
        consume_rate=sum(result.consume_rate for result in results),
        latency=_worst([result.latency for result in results]),
        output_tail="\n--\n".join(result.output_tail for result in results),
        cpu_seconds=None if None in cpu else sum(c for c in cpu if c is not None),
        wall_seconds=max((result.wall_seconds or 0.0) for result in results),
        instances=[
            {"publish_rate": result.publish_rate, "consume_rate": result.consume_rate}
            for result in results
        ],
    )


def _run_one(args: list[str], duration: int) -> PerfTestResult:
    try:
        completed = proccpu.run(args, timeout=duration + 60)
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


def _worst(latencies: list[dict[str, Any]]) -> dict[str, Any]:
    """Each percentile's highest over the instances, if every one gave them in one unit."""
    if not latencies or not all(latencies) or len({item.get("unit") for item in latencies}) > 1:
        return {}
    return {
        key: (max(item[key] for item in latencies) if key != "unit" else latencies[0][key])
        for key in latencies[0]
    }


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
