"""Memory paging (issue 4): a queue holds 4x the watermark while RSS stays bounded."""

import hashlib

import pika
import pytest
from hutch_testing.clients import connect

WATERMARK = 160 * 1024 * 1024
BODY_SIZE = 100 * 1024


def body_for(n: int) -> bytes:
    seed = hashlib.sha256(str(n).encode()).digest()
    return (seed * (BODY_SIZE // len(seed) + 1))[:BODY_SIZE]


@pytest.mark.slow
def test_queue_holds_four_times_the_watermark_with_bounded_rss(hutch_broker_factory, tmp_path):
    config = tmp_path / "broker.conf"
    config.write_text(f"vm_memory_high_watermark.absolute = {WATERMARK}\n")
    broker = hutch_broker_factory(extra_args=["--config", str(config)])
    count = 4 * WATERMARK // BODY_SIZE
    conn = connect(broker)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("big")
    for n in range(count):
        ch.basic_publish("", "big", body_for(n), pika.BasicProperties(message_id=str(n)))
    assert ch.queue_declare("big", passive=True).method.message_count == count
    for n in range(count):
        method, props, body = ch.basic_get("big", auto_ack=True)
        assert method is not None, f"message {n} missing"
        assert props.message_id == str(n)
        assert body == body_for(n), f"message {n} corrupted"
    conn.close()
    peak = broker.peak_rss_bytes()
    assert peak < 1.5 * WATERMARK, f"peak RSS {peak / 2**20:.0f} MiB for {count} messages"
