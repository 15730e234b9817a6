"""The well-behaved client beside a fuzzer: publish + get round trips, each one timed.

Run as ``python canary.py <amqp_port> <stop_file> <report_file>`` in its own process, so the
fuzzer's CPU use in the test process does not count as broker stall.  Until ``stop_file``
exists it publishes a message to its own queue and fetches it back, recording the round trip;
then it writes ``{"round_trips", "max_ms", "p99_ms", "errors", "worst"}`` as JSON to
``report_file`` (``worst``: the five longest round trips over 20 ms, with their wall-clock start,
so a stall can be matched with the fuzz connections open at that moment).
"""

import json
import sys
import time
from pathlib import Path

import pika


def main(port: int, stop_file: Path, report_file: Path) -> None:
    params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=0, connection_attempts=3)
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    timings: list[float] = []
    stalls: list[tuple[float, float]] = []  # (ms, wall-clock start) of round trips over 20 ms
    errors: list[str] = []
    while not stop_file.exists():
        body = str(len(timings)).encode()
        started = time.perf_counter()
        channel.basic_publish("", queue, body)
        method, _, got = channel.basic_get(queue, auto_ack=True)
        elapsed_ms = (time.perf_counter() - started) * 1000
        timings.append(elapsed_ms)
        if elapsed_ms > 20:
            stalls.append((elapsed_ms, time.time() - elapsed_ms / 1000))
        if method is None or got != body:
            errors.append(f"round trip {len(timings)}: got {got!r}, not {body!r}")
        time.sleep(0.002)
    connection.close()
    ordered = sorted(timings)
    report = {
        "round_trips": len(timings),
        "max_ms": ordered[-1] if ordered else None,
        "p99_ms": ordered[int(len(ordered) * 0.99)] if ordered else None,
        "errors": errors[:10],
        "worst": sorted(stalls, reverse=True)[:5],
    }
    report_file.write_text(json.dumps(report))


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
