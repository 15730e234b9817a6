"""The well-behaved client beside a fuzzer: publish + get round trips, each one timed.

Run as ``python canary.py <amqp_port> <stop_file> <report_file> <broker_pid>`` in its own
process, so the fuzzer's CPU use in the test process does not count as broker stall.  Until
``stop_file`` exists it publishes a message to its own queue and fetches it back, recording the
round trip; then it writes ``{"round_trips", "max_ms", "p99_ms", "stall_max_ms", "errors",
"worst"}`` as JSON to ``report_file``.

Why two figures: a round trip's wall clock also holds the time the broker's loop thread and the
canary's own thread were ready to run but waited for a CPU (the kernel's run-queue wait,
``/proc/<pid>/schedstat``), which on a loaded 2-core machine alone reached 77 ms. That share is
the machine's, not the broker's. ``stall_ms`` is the round trip minus both waits: the time the
broker spent on its own, running (its loop turn, whatever the fuzz connections gave it) or
blocked (a sleep, a lock, a file); a broker that blocks its loop on a bad frame still shows it
in full. ``worst``: the five largest ``stall_ms`` over 20 ms as (stall ms, round-trip ms,
wall-clock start), so a stall can be matched with the fuzz connections open at that moment.
"""

import json
import sys
import time
from pathlib import Path

import pika
from hutch_testing.cpuwait import run_queue_wait_ns


def main(port: int, stop_file: Path, report_file: Path, broker_pid: int) -> None:
    broker = Path(f"/proc/{broker_pid}/schedstat")  # the leader thread: the broker's loop
    own = Path("/proc/thread-self/schedstat")
    if not broker.exists() or not own.exists():
        raise SystemExit("the canary needs /proc/<pid>/schedstat (a kernel with schedstats)")
    params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=0, connection_attempts=3)
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    timings: list[float] = []
    stalls: list[float] = []
    worst: list[tuple[float, float, float]] = []  # (stall ms, round trip ms, wall-clock start)
    errors: list[str] = []
    while not stop_file.exists():
        body = str(len(timings)).encode()
        waited = run_queue_wait_ns(broker) + run_queue_wait_ns(own)
        started = time.perf_counter()
        channel.basic_publish("", queue, body)
        method, _, got = channel.basic_get(queue, auto_ack=True)
        elapsed_ms = (time.perf_counter() - started) * 1000
        waited_ms = (run_queue_wait_ns(broker) + run_queue_wait_ns(own) - waited) / 1e6
        stall_ms = max(0.0, elapsed_ms - waited_ms)
        timings.append(elapsed_ms)
        stalls.append(stall_ms)
        if stall_ms > 20:
            worst.append((stall_ms, elapsed_ms, time.time() - elapsed_ms / 1000))
        if method is None or got != body:
            errors.append(f"round trip {len(timings)}: got {got!r}, not {body!r}")
        time.sleep(0.002)
    connection.close()
    ordered = sorted(timings)
    report = {
        "round_trips": len(timings),
        "max_ms": ordered[-1] if ordered else None,
        "p99_ms": ordered[int(len(ordered) * 0.99)] if ordered else None,
        "stall_max_ms": max(stalls) if stalls else None,
        "errors": errors[:10],
        "worst": sorted(worst, reverse=True)[:5],
    }
    report_file.write_text(json.dumps(report))


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
