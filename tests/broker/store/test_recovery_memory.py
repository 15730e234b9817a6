"""A broker restarts with more persistent data than memory (isolation case 6).

Before: recovery held every recovered body in memory, so a Broker whose queues held more than
its memory (which paging allows while it runs) was OOM-killed at every start: its data was
unreachable until it got more memory than the data. Now recovery keeps an index and leaves the
bodies on disk; a queue reads each back as it reaches the head.

The broker runs with an absolute watermark of ``WATERMARK`` and is fed ``DATA`` (several times
that) in confirmed persistent messages, then killed (SIGKILL, or stopped with SIGTERM) and
started again. Its peak resident set (VmHWM, which covers recovery: the broker answers only
once it is done) must stay under the watermark, and a consumer then gets every message intact
and in order, with the peak still under the watermark.
"""

from __future__ import annotations

import hashlib
import signal
import time

import pika
import pytest
from hutch_testing.clients import connect

MIB = 1024 * 1024
WATERMARK = 128 * MIB
BODY_SIZE = 512 * 1024
COUNT = 600  # 300 MiB: over twice the watermark
PERSISTENT_QUEUE = "big"


def body_for(n: int) -> bytes:
    seed = hashlib.sha256(str(n).encode()).digest()
    return (seed * (BODY_SIZE // len(seed) + 1))[:BODY_SIZE]


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_restart_with_more_data_than_memory(hutch_broker_factory, tmp_path, stop):
    config = tmp_path / "broker.conf"
    config.write_text(f"vm_memory_high_watermark.absolute = {WATERMARK}\n")
    broker = hutch_broker_factory(extra_args=["--config", str(config)])
    connection = connect(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(PERSISTENT_QUEUE, durable=True)
    for n in range(COUNT):
        properties = pika.BasicProperties(delivery_mode=2, message_id=str(n))
        channel.basic_publish("", PERSISTENT_QUEUE, body_for(n), properties, mandatory=True)
    connection.close()
    assert broker.kill(stop) is not None, "the broker did not exit"

    began = time.monotonic()
    broker.start()
    started_in = time.monotonic() - began
    after_recovery = broker.peak_rss_bytes()
    assert after_recovery < WATERMARK, (
        f"peak RSS {after_recovery / MIB:.0f} MiB while recovering {COUNT * BODY_SIZE // MIB} "
        f"MiB (watermark {WATERMARK // MIB} MiB)"
    )

    channel = connect(broker).channel()
    channel.basic_qos(prefetch_count=16)
    assert channel.queue_declare(PERSISTENT_QUEUE, passive=True).method.message_count == COUNT
    deliveries = channel.consume(PERSISTENT_QUEUE, inactivity_timeout=30)
    for n, (method, properties, body) in enumerate(deliveries):
        assert method is not None, f"only {n} of {COUNT} messages delivered"
        assert properties.message_id == str(n), "out of order"
        assert body == body_for(n), f"message {n} corrupted"
        channel.basic_ack(method.delivery_tag)
        if n + 1 == COUNT:
            break
    channel.cancel()
    peak = broker.peak_rss_bytes()
    assert peak < WATERMARK, f"peak RSS {peak / MIB:.0f} MiB while draining"
    print(  # noqa: T201 - the figures for docs/isolation/recovery.md
        f"\n{stop.name}: restart {started_in:.2f} s, peak RSS after recovery "
        f"{after_recovery / MIB:.0f} MiB, after draining {peak / MIB:.0f} MiB"
    )
