"""Delivery-side memory stays bounded (docs/isolation/memory.md).

A consumer that stops reading its socket, or that sits on large unacked messages, must cost
its own deliveries, not the broker's memory: before the bound, 400 x 1 MB persistent messages
to a prefetch-0 consumer that never read took the broker from 73 to 827 MB, the memory alarm
went off and every publisher of every vhost was blocked. The consumer here is a raw socket
with a small receive buffer, so the test decides exactly when the client reads
(``hutch_testing.rawconsumer``).

Why the serial pass (hutch_testing.serial): each test holds another tenant's 20 publishes to
5 s beside the stuck consumer. What a connection's budget lets through, and bodies dropped from
memory coming back whole, measure nothing and are test_delivery_budget.py, beside the other
worker.
"""

from __future__ import annotations

import threading
import time

import pika
import pytest
from hutch_testing.rawconsumer import MiB, RawConsumer, body_for, publish, start_broker

# How long the stuck consumers sit before another tenant publishes: a broker without the delivery
# bounds pushes their deliveries in the consume's turn, and its memory sample (about once a
# second) raises the alarm. With every bound of ``memory.delivery_budget`` 1 GiB (a sitecustomize
# in the broker's process), 1.5 s still had the other tenant's publisher blocked past its 10 s
# ``blocked_connection_timeout`` in both tests; 3 s was twice that for nothing more (#29).
STUCK_S = 1.5


class RSSWatch:
    """The broker's peak VmRSS, sampled every 50 ms while the block runs."""

    def __init__(self, broker: object) -> None:
        self.broker = broker
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RSSWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.broker.rss_bytes())  # type: ignore[attr-defined]
            self._stop.wait(0.05)


def other_tenant_publishes(broker, count: int = 20) -> float:
    """Seconds a publisher in another vhost needs for ``count`` confirmed publishes; it fails
    if the broker blocks it (a memory alarm) for 10 s."""
    params = pika.ConnectionParameters(
        "127.0.0.1", broker.amqp_port, virtual_host="other", blocked_connection_timeout=10
    )
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("canary")
    began = time.monotonic()
    for _ in range(count):
        ch.basic_publish("", "canary", b"ping")
    elapsed = time.monotonic() - began
    conn.close()
    return elapsed


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_consumer_that_stops_reading_costs_no_broker_memory(hutch_broker_factory, tmp_path):
    watermark, count, size = 300 * MiB, 300, MiB
    broker = start_broker(hutch_broker_factory, tmp_path, watermark)
    publish(broker, "bulk", count, size, persistent=True)
    time.sleep(1.5)  # a memory sample pages the backlog out
    before = broker.rss_bytes()
    consumer = RawConsumer(broker.amqp_port)
    with RSSWatch(broker) as watch:
        consumer.consume("bulk")  # prefetch 0, and from now on it reads nothing
        time.sleep(STUCK_S)
        elapsed = other_tenant_publishes(broker)
    assert elapsed < 5, f"a publisher in another vhost needed {elapsed:.1f} s"
    growth = watch.peak - before
    assert growth < 64 * MiB, (
        f"broker RSS grew by {growth / MiB:.0f} MiB (from {before / MiB:.0f} MiB) for a "
        "consumer that reads nothing"
    )
    assert watch.peak < watermark
    received = 0
    for tag, _, body in consumer.deliveries(count):  # now it reads: everything, in order
        assert body == body_for(received, size), f"delivery {received} is not message {received}"
        received += 1
        if tag % 50 == 0:
            consumer.ack(tag, multiple=True)
    consumer.ack(0, multiple=True)
    assert received == count
    consumer.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_prefetch_times_large_persistent_bodies_is_not_held_in_memory(
    hutch_broker_factory, tmp_path
):
    """Prefetch 50 x 4 MiB unacked persistent messages: 200 MiB if their bodies stayed."""
    watermark, count, size, prefetch = 256 * MiB, 60, 4 * MiB, 50
    broker = start_broker(hutch_broker_factory, tmp_path, watermark)
    publish(broker, "big", count, size, persistent=True)
    time.sleep(1.5)
    before = broker.rss_bytes()
    consumer = RawConsumer(broker.amqp_port)
    with RSSWatch(broker) as watch:
        consumer.consume("big", prefetch=prefetch)
        first = [body for _, _, body in consumer.deliveries(prefetch)]  # read, none acked
        assert consumer.nothing_more(0.5), "more than the prefetch count was delivered"
        time.sleep(1.5)
        elapsed = other_tenant_publishes(broker)
    assert elapsed < 5, f"a publisher in another vhost needed {elapsed:.1f} s"
    assert first == [body_for(n, size) for n in range(prefetch)]
    growth = watch.peak - before
    assert growth < 64 * MiB, (
        f"broker RSS grew by {growth / MiB:.0f} MiB with {prefetch} x {size // MiB} MiB unacked"
    )
    consumer.ack(prefetch, multiple=True)
    rest = [body for _, _, body in consumer.deliveries(count - prefetch)]
    assert rest == [body_for(n, size) for n in range(prefetch, count)]
    consumer.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_many_stuck_consumers_together_stay_under_the_broker_wide_bound(
    hutch_broker_factory, tmp_path
):
    """40 consumers that never read, on one queue of 1,000 x 128 KiB: each is within its own
    bounds (2 MiB write marks, 512 KiB slice at this watermark), and all of them together stay
    under the broker-wide bound on buffered output (1/4 of the watermark) with a margin. The
    kernel's socket buffers take much of each consumer's share here, so the broker-wide bound
    itself is checked in memory (tests/broker/server/test_delivery_slices.py)."""
    watermark, count, size, consumers = 128 * MiB, 1000, 128 * 1024, 40
    broker = start_broker(hutch_broker_factory, tmp_path, watermark)
    publish(broker, "shared", count, size, persistent=True)
    time.sleep(1.5)
    before = broker.rss_bytes()
    stuck = [RawConsumer(broker.amqp_port) for _ in range(consumers)]
    with RSSWatch(broker) as watch:
        for consumer in stuck:
            consumer.consume("shared")
        time.sleep(STUCK_S)
        elapsed = other_tenant_publishes(broker)
    assert elapsed < 5, f"a publisher in another vhost needed {elapsed:.1f} s"
    growth = watch.peak - before
    assert growth < watermark // 4 + 16 * MiB, (
        f"broker RSS grew by {growth / MiB:.0f} MiB for {consumers} consumers that read nothing"
    )
    for consumer in stuck:
        consumer.close()
