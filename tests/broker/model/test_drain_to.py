"""A queue's only consumer is served by ``Queue._drain_to`` exactly as by ``drain``'s loop.

Why: ``drain`` hands a classic queue's only acking consumer to ``_drain_to``, which takes
messages without choosing the consumer again for each: the channel takes them as a run in one
call (``deliver_from``) and the queue adds its counters once, or, when messages may expire,
one at a time with ``_deliver``'s bookkeeping inline (#32). Everything a client or the management
API can see must be what the general loop gave: which messages go out and in which order, where
the delivering stops (the consumer's room), the expired messages dropped at the head, the
redelivered flags and every counter; and when it stops for want of room the consumers' cursor
says so, which the publish path reads (``publishes.enqueue``: no drain behind a full consumer).
Each case runs twice, once through ``drain`` as it is and once through the general loop alone
(``_drain_to`` replaced by the loop it stands for), and the two must agree at every step.
"""

from __future__ import annotations

from typing import Any

import pytest
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Consumer, Queue
from hutch_broker.protocol import properties
from hutch_testing.targets import OneAtATime

PLAIN = properties.encode_properties()
EXPIRING = properties.encode_properties(expiration="5")


class Room(OneAtATime):
    """The consumer's channel: room for ``room`` deliveries at a time, each one recorded."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.entries: list[Entry] = []
        self.capacity_asked = 0

    def has_capacity(self, consumer: Consumer) -> bool:
        self.capacity_asked += 1
        return consumer.unacked < self.room

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        self.entries.append(entry)

    def cancelled_by_broker(self, consumer: Consumer) -> None:
        raise AssertionError("not expected")


def general_loop(queue: Queue, consumer: Consumer, now_ms: int) -> int:
    """What ``_drain_to`` stands for: ``drain``'s loop for any number of consumers."""
    delivered = 0
    consumers = queue.consumers
    while queue.ready_count and consumers:
        chosen = consumers.next_with_room()
        if chosen is None:
            break
        entry = queue._pop_live_head(now_ms)
        if entry is None:
            break
        queue._deliver(chosen, entry)
        delivered += 1
    return delivered


def seen(queue: Queue, consumer: Consumer, channel: Room) -> dict[str, Any]:
    return {
        "delivered": [(entry.message.body, entry.redelivered) for entry in channel.entries],
        "stats_deliver": queue.stats_deliver,
        "stats_deliveries": dict(queue.stats_deliveries),
        "stats_redeliver": queue.stats_redeliver,
        "unacked_count": queue.unacked_count,
        "unacked_bytes": queue.unacked_bytes,
        "consumer_unacked": consumer.unacked,
        "ready_count": queue.ready_count,
        "ready_bytes": queue.ready_bytes,
        "full": queue.consumers.cursor < 0,
    }


def run(monkeypatch: pytest.MonkeyPatch, *, general: bool, ttl: bool) -> list[dict[str, Any]]:
    """Publish 12, deliver in rooms of 5, return 3 of them, ack, let time pass, deliver the rest."""
    with monkeypatch.context() as patch:
        if general:
            patch.setattr(Queue, "_drain_to", general_loop)
        queue = Queue("q", durable=False)
        channel = Room(5)
        consumer = Consumer("c", queue, channel, no_ack=False, exclusive=False, prefetch=0)
        for n in range(12):
            raw = EXPIRING if ttl and n % 3 == 1 else PLAIN
            queue.publish(Message("", "q", raw, b"m%d" % n), 0)
        steps = []
        queue.add_consumer(consumer)
        queue.drain(0)
        steps.append(seen(queue, consumer, channel))
        returned = channel.entries[1:4]
        for entry in returned:  # as a channel's reject with requeue does
            consumer.unacked -= 1
            queue.requeue(entry)
        queue.after_requeue()
        queue.drain(0)
        steps.append(seen(queue, consumer, channel))
        for _ in range(2):  # everything out so far acked, then 5 more each time
            outstanding = channel.entries[-consumer.unacked :]
            consumer.unacked = 0
            queue.settle_all(outstanding)
            queue.drain(10)  # the expiring ones are past their 5 ms now
            steps.append(seen(queue, consumer, channel))
        return steps


@pytest.mark.parametrize("ttl", [False, True], ids=["no-ttl", "some-expire"])
def test_the_only_consumer_gets_what_the_general_loop_gives(monkeypatch, ttl):
    fast = run(monkeypatch, general=False, ttl=ttl)
    assert fast == run(monkeypatch, general=True, ttl=ttl)
    first, again, _, last = fast
    assert [body for body, _ in first["delivered"]] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert first["full"], "stopped for want of room: the cursor says nobody has room"
    assert [flag for _, flag in again["delivered"][5:]] == [True, True, True]
    assert again["stats_redeliver"] == 3
    assert last["ready_count"] == 0
    assert not last["full"], "stopped because the queue is empty, not for want of room"
    bodies = [body for body, _ in last["delivered"]]
    if ttl:  # m4 and m7 and m10 expire unless delivered before 5 ms; m1 went at once
        assert b"m7" not in bodies and b"m10" not in bodies
        assert b"m4" in bodies and b"m1" in bodies
    else:
        assert sorted(set(bodies)) == sorted(b"m%d" % n for n in range(12))


def test_the_channel_gets_the_run_in_one_call(monkeypatch):
    """Not a call per delivery: the channel takes the run (``deliver_from``) while it has room,
    and the queue adds its counters once; a queue whose messages may expire asks per delivery."""
    runs: list[int] = []
    inner = Room.deliver_from

    def counted(self: Room, consumer: Consumer, queue: Queue, pop: Any) -> tuple[int, int, int]:
        result = inner(self, consumer, queue, pop)
        runs.append(result[0])
        return result

    monkeypatch.setattr(Room, "deliver_from", counted)
    queue, _, consumer = filled("q", PLAIN, 100)
    assert queue.drain(0) == 100
    assert runs == [100]
    assert (queue.stats_deliver, queue.unacked_count, consumer.unacked) == (100, 100, 100)
    expiring, other, _ = filled("e", EXPIRING, 10)
    assert expiring.drain(0) == 10
    assert runs == [100], "a queue that may expire delivers one at a time"
    assert len(other.entries) == 10


def filled(name: str, raw: bytes, count: int) -> tuple[Queue, Room, Consumer]:
    """A queue of ``count`` messages with properties ``raw``, then its one consumer."""
    queue = Queue(name, durable=False)
    channel = Room(1000)
    consumer = Consumer("c", queue, channel, no_ack=False, exclusive=False, prefetch=0)
    for n in range(count):
        queue.publish(Message("", name, raw, b"m%d" % n), 0)
    queue.add_consumer(consumer)
    return queue, channel, consumer
