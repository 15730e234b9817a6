"""Priority queues (``x-max-priority``) in memory: ordering, limits, TTL, requeue, validation.

The side-by-side suite (tests/sidebyside/test_priorities.py) holds the same rules against
RabbitMQ 3.10.8 over pika; these pin the model's part with explicit time and no sockets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hutch_broker.model import arguments, paging, ready
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Consumer, Queue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors, properties
from hutch_testing.targets import OneAtATime


def msg(body: str, priority: int | None = None, **props: Any) -> Message:
    if priority is not None:
        props["priority"] = priority
    return Message("", "q", properties.encode_properties(**props), body.encode())


def bodies(queue: Queue) -> list[str]:
    return [entry.message.body.decode() for entry in queue.ready_entries()]


def drain_all(queue: Queue) -> list[str]:
    found = []
    while (entry := queue.get(0, no_ack=True)) is not None:
        found.append(entry.message.body.decode())
    return found


class FakeChannel(OneAtATime):
    def __init__(self) -> None:
        self.delivered: list[Entry] = []

    def has_capacity(self, consumer: Consumer) -> bool:
        return consumer.prefetch == 0 or consumer.unacked < consumer.prefetch

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        self.delivered.append(entry)

    def cancelled_by_broker(self, consumer: Consumer) -> None:
        raise AssertionError("not expected")


def test_priority_accessor_reads_the_octet_after_delivery_mode_and_headers() -> None:
    raw = properties.encode_properties(
        content_type="t", headers={"a": 1}, delivery_mode=2, priority=7, expiration="5"
    )
    assert properties.priority(raw) == 7
    assert properties.priority(properties.encode_properties(priority=200)) == 200
    assert properties.priority(properties.encode_properties(delivery_mode=2)) == 0
    assert properties.priority(b"\x08") == 0  # truncated: absent, never an error


def test_highest_priority_first_fifo_within_a_priority_none_is_zero() -> None:
    queue = Queue("q", arguments={"x-max-priority": 5})
    for body, priority in [("a", None), ("b", 3), ("c", 0), ("d", 5), ("e", 3)]:
        queue.publish(msg(body, priority), 0)
    assert bodies(queue) == ["d", "b", "e", "a", "c"]
    assert drain_all(queue) == ["d", "b", "e", "a", "c"]
    assert queue.ready_count == 0


def test_a_priority_above_the_maximum_counts_as_the_maximum() -> None:
    queue = Queue("q", arguments={"x-max-priority": 2})
    for body, priority in [("a", 2), ("b", 9), ("c", 255), ("d", 1)]:
        queue.publish(msg(body, priority), 0)
    assert drain_all(queue) == ["a", "b", "c", "d"]


def test_without_x_max_priority_the_property_is_ignored() -> None:
    queue = Queue("q")
    for body, priority in [("a", 1), ("b", 9)]:
        queue.publish(msg(body, priority), 0)
    assert drain_all(queue) == ["a", "b"]


def test_requeue_returns_to_its_position_within_its_priority() -> None:
    queue = Queue("q", arguments={"x-max-priority": 9})
    for body, priority in [("l1", 1), ("h1", 9), ("h2", 9), ("l2", 1)]:
        queue.publish(msg(body, priority), 0)
    taken = [queue.get(0, no_ack=False) for _ in range(3)]  # h1 h2 l1
    queue.publish(msg("h3", 9), 0)
    for entry in reversed(taken):
        assert entry is not None
        queue.requeue(entry)
    assert bodies(queue) == ["h1", "h2", "h3", "l1", "l2"]
    assert [e.redelivered for e in queue.ready_entries()] == [True, True, False, True, False]


def test_consumers_get_the_highest_priority_ready_message() -> None:
    queue = Queue("q", arguments={"x-max-priority": 9})
    for body, priority in [("low", 1), ("high", 8)]:
        queue.publish(msg(body, priority), 0)
    channel = FakeChannel()
    queue.add_consumer(Consumer("c", queue, channel, no_ack=True, exclusive=False, prefetch=0))
    queue.drain(0)
    assert [e.message.body for e in channel.delivered] == [b"high", b"low"]


def test_drop_head_drops_the_highest_priority_message_as_rabbitmq_does() -> None:
    queue = Queue("q", arguments={"x-max-priority": 9, "x-max-length": 2})
    for body, priority in [("a", 1), ("b", 5), ("c", 1)]:
        queue.publish(msg(body, priority), 0)
    assert bodies(queue) == ["a", "c"]


def test_reject_publish_counts_every_priority() -> None:
    args = {"x-max-priority": 9, "x-max-length": 1, "x-overflow": "reject-publish"}
    queue = Queue("q", arguments=args)
    assert queue.publish(msg("a", 1), 0) != queue.publish(msg("b", 9), 0)
    assert bodies(queue) == ["a"]


def test_ttl_expires_at_the_head_of_the_highest_level() -> None:
    queue = Queue("q", arguments={"x-max-priority": 9})
    queue.publish(msg("short-high", 9, expiration="10"), 0)
    queue.publish(msg("long-low", 1, expiration="1000"), 0)
    assert drain_all_at(queue, 50) == ["long-low"]


def drain_all_at(queue: Queue, now_ms: int) -> list[str]:
    found = []
    while (entry := queue.get(now_ms, no_ack=True)) is not None:
        found.append(entry.message.body.decode())
    return found


def test_expired_high_priority_messages_are_dead_lettered() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("dlq", now_ms=0)
    args = {"x-max-priority": 3, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    queue, _ = vhost.declare_queue("q", arguments=args, now_ms=0)
    queue.publish(msg("gone", 3, expiration="1"), 0)
    queue.publish(msg("kept", 0), 0)
    assert drain_all_at(queue, 10) == ["kept"]
    assert drain_all(vhost.get_queue("dlq")) == ["gone"]


def test_purge_empties_every_level() -> None:
    queue = Queue("q", arguments={"x-max-priority": 3})
    for priority in range(4):
        queue.publish(msg(str(priority), priority), 0)
    assert queue.purge() == 4
    assert (queue.ready_count, bodies(queue), queue.get(0, no_ack=True)) == (0, [], None)


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (256, "{max_value_exceeded,256}"),
        (-1, "{value_negative,-1}"),
        ("5", '"expected integer, got longstr"'),
        (True, '"expected integer, got bool"'),
    ],
)
def test_bad_x_max_priority_gets_rabbitmqs_406(value: Any, detail: str) -> None:
    with pytest.raises(errors.AMQPError) as caught:
        arguments.validate_queue_arguments("q", "/", {"x-max-priority": value})
    assert caught.value.reply_code == 406
    assert caught.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q' in vhost '/': {detail}"
    )


@pytest.mark.parametrize("value", [0, 1, 255])
def test_x_max_priority_0_to_255_is_valid(value: int) -> None:
    arguments.validate_queue_arguments("q", "/", {"x-max-priority": value})


def test_redeclare_compares_x_max_priority() -> None:
    with pytest.raises(errors.AMQPError, match="inequivalent arg 'x-max-priority'"):
        arguments.check_queue_equivalence("q", "/", {"x-max-priority": 5}, {"x-max-priority": 6})


class CountingLevels(dict[int, Any]):
    """A priority queue's table of levels that counts every level a walk over it visits
    (``max`` when the top level empties, ``sorted`` for listings and paging)."""

    def __init__(self) -> None:
        super().__init__()
        self.visits = 0

    def __iter__(self) -> Iterator[int]:
        for number in super().__iter__():
            self.visits += 1
            yield number


def test_many_levels_times_many_messages_stay_linear() -> None:
    """Hostile input: 256 levels, messages spread over all of them; cost per message is O(1).

    Counted, not timed: the levels walked. Each of the 256 levels empties once, and only then is
    the next top level looked for among the levels left, so at most 256 x 256 visits in all, at
    any count; a scan of all levels per message would be 6,000 x 256, 23 times that bound.
    """
    queue = Queue("q", arguments={"x-max-priority": 255})
    levels = queue._ready._levels = CountingLevels()
    count = 6_000
    for n in range(count):
        queue.publish(msg("", n % 256), 0)
    taken = 0
    while queue.get(0, no_ack=True) is not None:
        taken += 1
    assert taken == count
    assert levels.visits <= 256 * 256, levels.visits


def test_levels_exist_only_while_they_hold_messages() -> None:
    levels = ready.Prioritised(255)
    entries = [Entry(n, msg("x", n)) for n in range(256)]
    for entry in entries:
        levels.push_fresh(entry)
    assert (len(levels), levels.peek()) == (256, entries[255])
    while levels.pop() is not None:
        pass
    assert (len(levels), levels.peek(), levels.fresh_count()) == (0, None, 0)
    assert list(levels) == [] and not levels._levels


def test_paged_out_bodies_come_back_in_priority_order() -> None:
    class Store:
        def __init__(self) -> None:
            self.records: dict[int, bytes] = {}

        def append(self, **record: Any) -> int:
            self.records[len(self.records) + 1] = record["body"]
            return len(self.records)

        def read(self, msg_id: int) -> Any:
            return type("Stored", (), {"body": self.records[msg_id]})

        def ack(self, msg_id: int) -> None:
            self.records.pop(msg_id)

    class Stores:
        def __init__(self) -> None:
            self.store = Store()

        def open_queue(self, vhost: str, queue: str) -> Store:
            return self.store

        def delete_queue(self, vhost: str, queue: str) -> None:
            pass

    pager = paging.Pager(Stores())  # type: ignore[arg-type]
    pager.active = True
    queue = Queue("q", arguments={"x-max-priority": 9})
    queue.pager = pager
    big = paging.KEEP_BYTES // 2
    pairs = [("a", 1), ("b", 1), ("c", 9), ("d", 5), ("e", 9)]
    for body, priority in pairs:
        queue.publish(msg(body * big, priority), 0)
    assert queue.paged_out[0] >= 2
    assert drain_all(queue) == [letter * big for letter in "cedab"]  # bodies paged back in
    assert queue.ready_bytes == 0
