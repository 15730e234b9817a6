"""bench/stallprobe.py on a real hutch-broker: the patched entry points count, SIGUSR1 resets.

Why: the probe patches the broker's methods by name; a rename in the broker would leave a
name uncounted and the stall table silently short. This starts the probed broker as
bench/stalls.py does, sends and consumes messages over a real connection, and asserts that
the reads, the end-of-tick work, the timers and the 1 ms turn timer were counted, that a reset
starts the window again, and what the broker's own start-up left: gc frozen after start-up
with its raised thresholds (``hutch_broker.__main__``) and TCP_NODELAY on the client's socket.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pika
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import stalls  # noqa: E402

pytestmark = pytest.mark.broker  # starts a broker


def next_report(broker: stalls.ProbedBroker, after: float) -> dict[str, Any]:
    document = stalls.read_counts(broker, after)
    assert isinstance(document, dict)
    return document


def test_the_probed_broker_counts_its_reads_timers_and_turns() -> None:
    broker = stalls.ProbedBroker()
    broker.start()
    try:
        params = pika.URLParameters(broker.amqp_url)
        with pika.BlockingConnection(params) as connection:
            channel = connection.channel()
            channel.queue_declare("probe")
            for index in range(50):
                channel.basic_publish("", "probe", f"m{index}".encode())
            got = [channel.basic_get("probe", auto_ack=True)[2] for _ in range(50)]
            assert got == [f"m{index}".encode() for index in range(50)]
            report = next_report(broker, time.time() + 1.1)  # a full second of timers too
            names = report["names"]
            for name in ("read", "end_of_tick", "memory_sample", "tick_connections", "turn"):
                assert names[name]["count"] > 0, name
            assert names["expiry_tick"]["count"] >= 5
            assert report["nodelay"] == [1]
            assert report["gc"]["freeze_count"] > 0
            assert report["gc"]["threshold"] == [100_000, 50, 100]
            reads_before = names["read"]["count"]
            assert broker.pid is not None
            os.kill(broker.pid, signal.SIGUSR1)
            reset_at = time.time()
            after = next_report(broker, reset_at)
            assert after["seconds"] < time.time() - reset_at + 1.5
            assert after["names"].get("read", {"count": 0})["count"] < reads_before
    finally:
        broker.stop()
    json.dumps(report)  # what bench/stalls.py writes with --json
