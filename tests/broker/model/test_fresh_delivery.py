"""A publish handed to a waiting consumer is delivered as if it had waited in the queue.

Why: ``Queue.publish`` does ``_deliver``'s bookkeeping inline for the fresh entry it gives a
waiting consumer that acks (f6d55c9, #32), skipping ``_deliver``'s delivery count and redelivery
branches on the grounds that a fresh entry needs neither. The cases where a fresh entry might
need them are a message that arrives already dead-lettered (x-death headers), one that carries
an x-delivery-count into a quorum queue, and a message returned and delivered again. Each is
run two ways, the consumer waiting (the inline path) and the consumer arriving after the
publish (``drain`` and ``_deliver``), and everything a client or the management API can see
must be the same: the delivered headers and redelivered flag, the deliver, redeliver and ack
counters, the unacked counts and bytes, the consumer's own count; then again after a requeue.
"""

from __future__ import annotations

from typing import Any

import pytest
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Consumer, Queue
from hutch_broker.protocol import properties
from hutch_testing.targets import OneAtATime

QUORUM = {"x-queue-type": "quorum"}
X_DEATH = [{"count": 1, "reason": "expired", "queue": "src", "exchange": "", "routing-keys": []}]
MESSAGES = {
    "plain": properties.encode_properties(),
    "persistent with headers": properties.encode_properties(headers={"h": 1}, delivery_mode=2),
    "dead-lettered": properties.encode_properties(
        headers={"x-death": X_DEATH, "x-first-death-reason": "expired"}, delivery_mode=2
    ),
    "x-delivery-count from the publisher": properties.encode_properties(
        headers={"x-delivery-count": 5}
    ),
}


class Recorder(OneAtATime):
    """The consumer's channel: room for everything, each delivery recorded as a client sees it."""

    def __init__(self) -> None:
        self.seen: list[tuple[bool, dict[str, Any], bytes]] = []
        self.entries: list[Entry] = []

    def has_capacity(self, consumer: Consumer) -> bool:
        return True

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        decoded = properties.decode_properties(entry.message.raw_properties)
        self.seen.append((entry.redelivered, decoded.get("headers", {}), entry.message.body))
        self.entries.append(entry)

    def cancelled_by_broker(self, consumer: Consumer) -> None:
        raise AssertionError("not expected")


def observed(queue: Queue, consumer: Consumer, channel: Recorder) -> dict[str, Any]:
    return {
        "deliveries": list(channel.seen),
        "stats_deliver": queue.stats_deliver,
        "stats_deliveries": dict(queue.stats_deliveries),
        "stats_redeliver": queue.stats_redeliver,
        "stats_ack": queue.stats_ack,
        "unacked_count": queue.unacked_count,
        "unacked_bytes": queue.unacked_bytes,
        "consumer_unacked": consumer.unacked,
        "ready_count": queue.ready_count,
    }


def run(raw: bytes, arguments: dict[str, Any], *, waiting: bool, no_ack: bool) -> list[Any]:
    """Publish one message, deliver it, return it, deliver it again, ack it: what was seen."""
    queue = Queue("q", durable=True, arguments=arguments)
    channel = Recorder()
    consumer = Consumer("c", queue, channel, no_ack=no_ack, exclusive=False, prefetch=0)
    steps = []
    if waiting:
        queue.add_consumer(consumer)
        queue.publish(Message("", "q", raw, b"body"), 0)
    else:
        queue.publish(Message("", "q", raw, b"body"), 0)
        queue.add_consumer(consumer)
        queue.drain(0)
    steps.append(observed(queue, consumer, channel))
    if not no_ack:
        (entry,) = channel.entries
        consumer.unacked -= 1  # as the channel does when it hands the entry back
        queue.requeue(entry)
        queue.drain(0)
        steps.append(observed(queue, consumer, channel))
        consumer.unacked -= 1
        queue.settle(channel.entries[-1])
        steps.append(observed(queue, consumer, channel))
    return steps


@pytest.mark.parametrize("no_ack", [False, True], ids=["ack", "no-ack"])
@pytest.mark.parametrize("arguments", [{}, QUORUM], ids=["classic", "quorum"])
@pytest.mark.parametrize("name", list(MESSAGES))
def test_a_waiting_consumer_sees_what_a_later_one_sees(
    name: str, arguments: dict[str, Any], no_ack: bool
) -> None:
    raw = MESSAGES[name]
    inline = run(raw, arguments, waiting=True, no_ack=no_ack)
    assert inline == run(raw, arguments, waiting=False, no_ack=no_ack)
    first = inline[0]
    assert first["deliveries"][0][0] is False  # a first delivery is never redelivered
    assert first["stats_deliver"] == 1
    assert first["stats_deliveries"] == {"deliver_no_ack" if no_ack else "deliver": 1}
    if not no_ack:
        assert first["unacked_count"] == first["consumer_unacked"] == 1
        assert first["unacked_bytes"] == 4
        again = inline[1]
        assert again["deliveries"][1][0] is True
        assert again["stats_redeliver"] == 1
        assert inline[2]["unacked_count"] == inline[2]["unacked_bytes"] == 0
