"""The driver-side consumer on its own (no Spark): when it gives up, and why it says so."""

import time
from typing import Any

import pika
import pytest
from hutch_demo import ports

pytestmark = pytest.mark.spark


def consumer(url: str, queue: str, **kwargs: Any) -> Any:
    from hutch_spark.consumer import QueueConsumer

    return QueueConsumer(parameters=pika.URLParameters(url), queue=queue, prefetch=10, **kwargs)


def take_for(live: Any, seconds: float) -> None:
    """Keeps asking for messages, as latestOffset does, until an error or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        live.take(max_messages=1, max_bytes=1, timeout_s=0.2)


def test_unreachable_broker_fails_after_the_retry_budget_naming_the_queue() -> None:
    from hutch_spark.errors import HutchConnectionError

    closed = f"amqp://guest:guest@127.0.0.1:{ports.free_port()}/%2F"
    lost = consumer(closed, "orders", give_up_after_s=1.5, max_backoff_s=0.5)
    lost.start()
    try:
        assert lost.take(max_messages=1, max_bytes=1, timeout_s=0.1) == []  # retrying, no error
        with pytest.raises(HutchConnectionError, match=r"cannot consume from queue 'orders'"):
            take_for(lost, 20)
    finally:
        lost.stop()


def test_deleting_the_queue_cancels_the_consumer_with_a_clear_error(amqp: Any) -> None:
    from hutch_spark.errors import HutchConnectionError

    queue = amqp.queue()
    amqp.publish(queue, 3)
    live = consumer(amqp.url, queue)
    live.start()
    try:
        assert live.wait_until_consuming(10)
        taken = live.take(max_messages=10, max_bytes=10_000, timeout_s=5)
        assert [d.tag for d in taken] == [1, 2, 3]
        amqp.channel.queue_delete(queue)
        with pytest.raises(
            HutchConnectionError, match=rf"cancelled our consumer of queue '{queue}'"
        ):
            take_for(live, 10)
    finally:
        live.stop()
