"""A canary process for test_listing_isolation: one publish -> delivery round trip every 20 ms.

Run as ``python listing_canary.py AMQP_URL SECONDS``; prints ``ready`` after its first round
trip and, at the end, one JSON line: count, max_ms, p99_ms, misses. A process of its own, so
the test's pollers (JSON parsing of 5,000 items) do not delay its timers.
"""

import json
import sys
import time

import pika

INTERVAL_S = 0.020
MISS_AFTER_S = 5.0


def main() -> None:
    url, seconds = sys.argv[1], float(sys.argv[2])
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    arrived: list[float] = []
    channel.basic_consume(queue, lambda *_: arrived.append(time.monotonic()), auto_ack=True)

    def round_trip() -> float:
        arrived.clear()
        sent = time.monotonic()
        channel.basic_publish("", queue, b"canary")
        while not arrived and time.monotonic() - sent < MISS_AFTER_S:
            connection.process_data_events(time_limit=0.001)
        return (arrived[0] if arrived else time.monotonic()) - sent

    round_trip()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    samples = []
    misses = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.monotonic()
        sample = round_trip()
        misses += sample >= MISS_AFTER_S
        samples.append(sample * 1000)
        time.sleep(max(0.0, INTERVAL_S - (time.monotonic() - began)))
    connection.close()
    ordered = sorted(samples)
    report = {
        "count": len(ordered),
        "max_ms": ordered[-1],
        "p99_ms": ordered[max(0, int(len(ordered) * 0.99) - 1)],
        "misses": misses,
    }
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
