"""Where hutch-broker's CPU goes per message: a sampling profile of each bench scenario, by stage.

Why: ``bench/run.py`` says how much CPU a message costs (CPU-seconds per consumed message, from
/proc); this says where. py-spy samples the broker's stacks from outside at a fixed rate, so the
broker runs unmodified and at full speed (cProfile's per-call hook would more than double the
cost of the short functions a message goes through and distort the shares). Each sample is given
to one stage of a message's life by the deepest stage frame on its stack (a delivery made inside
a publish, to a consumer that was waiting, counts as delivery), and a stage's microseconds per
message are its share of the samples times the broker's CPU per consumed message.

    python bench/cpu_profile.py [--scenarios 1,2,3] [--duration 15] [--rate 250]
                            [--vhost-workers N] [--hutch-config FILE] [--json out.json]
                            [--markdown out.md]

With ``--vhost-workers N`` the broker runs its vhosts in N worker processes (docs/broker.md):
one py-spy samples each worker and their samples are summed, since the workers do the
messages' work; the listener, which only hands connections over, is not sampled, and its CPU
per message is reported on its own. N samplers cost N times one sampler's CPU on a machine
whose cores the broker and the load already share, so compare the shares, not the rates.

py-spy comes from PyPI (``pip install py-spy``; Linux needs ptrace rights, root here). The
figures depend on the machine; the shares much less, and they are what docs/bench/profile.md
reports.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import proccpu
import run
import scenarios
from hutch_broker.server import startbeat
from hutch_demo import processes

# Stages in the order a message meets them, each with the frames that mark it: (function name,
# or "" for any function, and the source file's path suffix). A sample belongs to the stage of
# the deepest marked frame on its stack; on one frame a marker that names the function wins
# over a file-wide one, so ``Connection.send_deliver`` (protocol/connection.py, which the read
# stage claims as a whole) counts as delivery.
STAGES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "read: socket and frame parsing",
        (
            ("AMQPConnection.data_received", "server/amqp.py"),
            ("", "protocol/connection.py"),
            ("", "protocol/events.py"),
        ),
    ),
    (
        "publish: method, permissions, message",
        (
            ("publish", "dispatch/publishing.py"),
            ("publish_run", "dispatch/publishing.py"),
            ("_exchange", "dispatch/publishing.py"),
            ("", "model/messages.py"),
            ("", "protocol/properties.py"),
            ("", "protocol/rewrite.py"),
            ("", "dispatch/replyto.py"),
        ),
    ),
    (
        "route: exchange and bindings",
        (
            ("publish_within", "model/publishes.py"),
            ("routing_keys", "model/publishes.py"),
            ("", "model/routing.py"),
            ("", "model/exchanges.py"),
            ("", "model/topics.py"),
        ),
    ),
    (
        "enqueue: queue and store append",
        (
            ("Queue.publish", "model/queues.py"),
            ("", "model/ready.py"),
            ("", "store/queuestores.py"),
            ("", "store/segments.py"),
            ("", "store/records.py"),
        ),
    ),
    (
        "deliver: consumer choice and encoding",
        (
            ("Channel.deliver", "dispatch/channels.py"),
            ("Channel.deliver_from", "dispatch/channels.py"),
            ("Channel.drain_consumers", "dispatch/channels.py"),
            ("Queue.drain", "model/queues.py"),
            ("Queue._deliver", "model/queues.py"),
            ("", "model/consumers.py"),
            ("Connection.send_deliver", "protocol/connection.py"),
            ("Connection.send_deliver_entries", "protocol/connection.py"),
            ("encode_deliver", "protocol/codec.py"),
        ),
    ),
    (
        "ack: settle and free",
        (
            ("basic_ack", "dispatch/methods.py"),
            ("Queue.settle", "model/queues.py"),
            ("Channel.settle", "dispatch/channels.py"),
            ("Channel.take_unacked", "dispatch/channels.py"),
        ),
    ),
    ("confirm: group commit and basic.ack out", (("", "dispatch/commits.py"),)),
    (
        "fsync (worker thread)",
        (
            ("", "store/syncing.py"),
            ("", "store/files.py"),
            ("MessageStore.sync", "store/messages.py"),
        ),
    ),
    ("write: socket", (("AMQPConnection.flush", "server/amqp.py"),)),
)
OTHER = "event loop (uvloop, C), timers and the rest"

# Output frames that belong to whoever calls them, not to the file they live in: a confirm's
# basic.ack goes through ``send_method`` in protocol/connection.py, and is confirm work.
PASS_THROUGH: tuple[tuple[str, str], ...] = (
    ("Connection.send_method", "protocol/connection.py"),
    ("Connection._may_send", "protocol/connection.py"),
    ("Connection._may_send_content", "protocol/connection.py"),
    ("Connection.data_to_send", "protocol/connection.py"),
)

# Named markers first, then file-wide ones: the order ``stage_of`` tries them on each frame.
_MARKERS: tuple[tuple[str, str, str], ...] = tuple(
    sorted(
        ((function, suffix, stage) for stage, markers in STAGES for function, suffix in markers),
        key=lambda marker: not marker[0],
    )
)


@dataclass(frozen=True)
class Frame:
    function: str
    path: str

    @classmethod
    def parse(cls, text: str) -> Frame:
        """``func (path/to/file.py:123)`` as py-spy's raw format writes a frame."""
        function, _, rest = text.partition(" (")
        return cls(function, rest.rsplit(":", 1)[0])


def stage_of(frames: list[Frame]) -> str:
    """The stage of the deepest marked frame (the stack runs from the root to the leaf)."""
    for frame in reversed(frames):
        if any(
            frame.function == function and frame.path.endswith(suffix)
            for function, suffix in PASS_THROUGH
        ):
            continue
        for function, suffix, stage in _MARKERS:
            if frame.path.endswith(suffix) and (not function or frame.function == function):
                return stage
    return OTHER


def stage_samples(collapsed: Iterable[str]) -> Counter[str]:
    """Samples per stage from py-spy's raw (collapsed) lines: ``frame;frame;... count``."""
    counts: Counter[str] = Counter()
    for line in collapsed:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        counts[stage_of([Frame.parse(part) for part in stack.split(";")])] += int(count)
    return counts


def breakdown(counts: Counter[str], cpu_us_per_message: float) -> list[dict[str, Any]]:
    """Each stage's share of the samples and of the CPU per consumed message, in stage order."""
    total = sum(counts.values())
    if total == 0:
        return []
    rows = []
    for stage in [name for name, _ in STAGES] + [OTHER]:
        share = counts.get(stage, 0) / total
        rows.append(
            {
                "stage": stage,
                "samples": counts.get(stage, 0),
                "share": round(share, 4),
                "us_per_message": round(share * cpu_us_per_message, 2),
            }
        )
    return rows


WORKER_FLAG = b"--vhost-worker-index"


def is_vhost_worker(arguments: list[bytes]) -> bool:
    """Whether a command line (``/proc/<pid>/cmdline`` split at NULs) is a vhost worker's."""
    return WORKER_FLAG in arguments[:-1]  # the flag and the index after it


def sampled_pids(broker: processes.BrokerProcess, vhost_workers: int) -> list[int]:
    """The processes whose stacks hold a message's work: the broker's one, or its workers."""
    if not vhost_workers:
        if broker.pid is None:
            raise run.BenchError("hutch-broker has no process id")
        return [broker.pid]
    found = []
    for pid in broker.group_pids():
        with contextlib.suppress(OSError):
            if is_vhost_worker(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")):
                found.append(pid)
    if len(found) != vhost_workers:
        raise run.BenchError(f"{len(found)} vhost workers running, not {vhost_workers}")
    return found


def io_calls(text: str) -> tuple[int, int]:
    """The read and write system calls so far, from a ``/proc/<pid>/io`` text (``syscr``,
    ``syscw``): how many messages share a syscall is what batching per loop turn decides."""
    counters = startbeat.io_counters(text)
    return counters["syscr"], counters["syscw"]


def _io_calls_of(pids: list[int]) -> tuple[int, int]:
    calls = [io_calls(Path(f"/proc/{pid}/io").read_text()) for pid in pids]
    return sum(read for read, _ in calls), sum(write for _, write in calls)


def _cpu_of(pids: list[int]) -> float:
    return proccpu.total_seconds(
        [proccpu.read_stat(pid) for pid in pids], proccpu.clock_ticks(), children=False
    )


def _sampler(py_spy: str, pid: int, raw: Path, rate: int, duration: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [py_spy, "record", "--gil", "--format", "raw", "--rate", str(rate),
         "--duration", str(duration), "--output", str(raw), "--pid", str(pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def profile_scenario(
    scenario: scenarios.Scenario,
    duration: int,
    rate: int,
    config: Path | None,
    py_spy: str,
    raw_dir: Path | None = None,
    vhost_workers: int = 0,
) -> dict[str, Any]:
    """One hutch-broker, loadgen for ``duration`` seconds, py-spy sampling it (or each of its
    vhost workers) meanwhile."""
    broker = run.make_broker("hutch", None, config, vhost_workers)
    broker.start()
    try:
        if vhost_workers:
            run.wait_for_workers(broker, vhost_workers, timeout=60)
        with tempfile.TemporaryDirectory(prefix="hutch-profile-") as tmp:
            pids = sampled_pids(broker, vhost_workers)
            raws = [Path(tmp) / f"stacks-{pid}.txt" for pid in pids]
            run.create_vhosts(broker, scenario, vhost_workers)  # before the CPU window
            cpu_before, sampled_before = run.cpu_seconds(broker), _cpu_of(pids)
            io_before = _io_calls_of(pids)
            samplers = [
                _sampler(py_spy, pid, raw, rate, duration)
                for pid, raw in zip(pids, raws, strict=True)
            ]
            try:
                result = run.run_loadgen(broker.amqp_url, scenario, duration)
            finally:
                errors = [sampler.communicate(timeout=duration + 60)[1] for sampler in samplers]
            cpu_after, sampled_after = run.cpu_seconds(broker), _cpu_of(pids)
            io_after = _io_calls_of(pids)
            counts: Counter[str] = Counter()
            for pid, sampler, raw, err in zip(pids, samplers, raws, errors, strict=True):
                if sampler.returncode != 0 or not raw.exists():
                    raise run.BenchError(
                        f"py-spy failed ({sampler.returncode}): {err.strip()[-300:]}"
                    )
                counts += stage_samples(raw.read_text().splitlines())
                if raw_dir is not None:
                    raw_dir.mkdir(parents=True, exist_ok=True)
                    kept = f"scenario{scenario.number}" + (f"-pid{pid}" if vhost_workers else "")
                    shutil.copy(raw, raw_dir / f"{kept}.txt")
    finally:
        broker.stop()
    if cpu_before is None or cpu_after is None or not result.get("consumed"):
        raise run.BenchError(f"scenario {scenario.number}: no CPU figure or nothing consumed")
    cpu_us = (cpu_after - cpu_before) / result["consumed"] * 1e6
    sampled_us = (sampled_after - sampled_before) / result["consumed"] * 1e6
    return {
        "scenario": scenario.number,
        "title": scenario.title,
        "vhost_workers": vhost_workers,
        "consumed_per_s": round(result["consume_rate"]),
        "cpu_us_per_message": round(cpu_us, 2),
        # The processes not sampled (a workers' listener): their CPU is in the total only.
        "unsampled_us_per_message": round(cpu_us - sampled_us, 2),
        # System calls of the sampled processes per consumed message (py-spy reads the
        # broker's memory from its own process, so it adds none of these).
        "read_calls_per_message": round((io_after[0] - io_before[0]) / result["consumed"], 3),
        "write_calls_per_message": round((io_after[1] - io_before[1]) / result["consumed"], 3),
        "samples": sum(counts.values()),
        # Shares of the sampled processes' samples, scaled to their own CPU per message.
        "stages": breakdown(counts, sampled_us),
    }


def markdown(results: list[dict[str, Any]]) -> str:
    """One table: a row per stage, a column per scenario (µs per consumed message, share)."""

    def title(result: dict[str, Any]) -> str:
        workers = result.get("vhost_workers", 0)
        return f"scenario {result['scenario']}" + (f", {workers} vhost workers" if workers else "")

    head = "| stage | " + " | ".join(title(r) for r in results) + " |"
    lines = [head, "|---|" + "---|" * len(results)]
    stages = [row["stage"] for row in results[0]["stages"]] if results else []
    for index, stage in enumerate(stages):
        cells = [
            f"{r['stages'][index]['us_per_message']:.2f} µs ({r['stages'][index]['share']:.0%})"
            for r in results
        ]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    if any(r.get("vhost_workers") for r in results):
        unsampled = " | ".join(f"{r.get('unsampled_us_per_message', 0):.2f} µs" for r in results)
        lines.append(f"| not sampled: the workers' listener | {unsampled} |")
    for key, label in (("read_calls_per_message", "read"), ("write_calls_per_message", "write")):
        if all(key in r for r in results):
            calls = " | ".join(f"{r[key]:.3f}" for r in results)
            lines.append(f"| {label} system calls per consumed message | {calls} |")
    total = " | ".join(f"**{r['cpu_us_per_message']:.2f} µs**" for r in results)
    lines.append(f"| **broker CPU per consumed message** | {total} |")
    rates = " | ".join(f"{r['consumed_per_s']:,}/s" for r in results)
    lines.append(f"| consumed (under the profiler) | {rates} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="1,2,3")
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--hutch-config", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--raw-dir", type=Path, default=None, help="keep py-spy's stacks here")
    parser.add_argument(
        "--vhost-workers",
        type=run.worker_counts,
        default=[0],
        help="comma-separated worker counts, each scenario profiled with each (0: one process)",
    )
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        parser.error("py-spy is not installed: pip install py-spy")
    numbers = [int(n) for n in args.scenarios.split(",") if n]
    unknown = [n for n in numbers if n not in scenarios.SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {sorted(scenarios.SCENARIOS)}")
    began = time.monotonic()
    results = [
        profile_scenario(
            scenarios.SCENARIOS[n],
            args.duration,
            args.rate,
            args.hutch_config,
            py_spy,
            args.raw_dir,
            workers,
        )
        for n in numbers
        for workers in args.vhost_workers
    ]
    document = {
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "arguments": {
            "duration": args.duration,
            "rate": args.rate,
            "vhost_workers": args.vhost_workers,
        },
        "load_average": Path("/proc/loadavg").read_text().split()[:3],
        "results": results,
        "seconds": round(time.monotonic() - began, 1),
    }
    text = markdown(results)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
