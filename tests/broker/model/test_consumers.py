"""Consumer choice in memory: consumer priorities (x-priority) and single active consumer.

The side-by-side suites (tests/sidebyside/test_consumer_priorities.py and
test_single_active_consumer.py) hold the same rules against RabbitMQ 3.10.8 over pika.
"""

from __future__ import annotations

from typing import Any

import pytest
from hutch_broker.model import arguments
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Consumer, Queue
from hutch_broker.protocol import errors, properties
from hutch_testing.targets import OneAtATime

PLAIN = properties.encode_properties()


class FakeChannel(OneAtATime):
    """Per-consumer prefetch, like basic.qos global=false; records deliveries by consumer tag."""

    def __init__(self, log: list[tuple[str, str]]) -> None:
        self.log = log

    def has_capacity(self, consumer: Consumer) -> bool:
        return consumer.prefetch == 0 or consumer.unacked < consumer.prefetch

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        self.log.append((consumer.tag, entry.message.body.decode()))

    def cancelled_by_broker(self, consumer: Consumer) -> None:
        raise AssertionError("not expected")


def add(queue: Queue, log: list[tuple[str, str]], tag: str, **kwargs: Any) -> Consumer:
    arguments = {"x-priority": kwargs.pop("priority")} if "priority" in kwargs else {}
    consumer = Consumer(
        tag,
        queue,
        kwargs.pop("channel", None) or FakeChannel(log),
        no_ack=False,
        exclusive=False,
        prefetch=kwargs.pop("prefetch", 0),
        arguments=arguments,
    )
    queue.add_consumer(consumer)
    return consumer


def publish(queue: Queue, *bodies: str) -> None:
    for body in bodies:
        queue.publish(Message("", "q", PLAIN, body.encode()), 0)


def test_higher_priority_consumers_get_messages_while_they_have_room() -> None:
    queue, log = Queue("q"), []
    add(queue, log, "low", priority=-5)
    add(queue, log, "high", priority=10, prefetch=2)
    add(queue, log, "default")
    publish(queue, "a", "b", "c", "d")
    assert log == [("high", "a"), ("high", "b"), ("default", "c"), ("default", "d")]


def test_equal_priorities_take_turns_and_a_lower_one_waits() -> None:
    queue, log = Queue("q"), []
    add(queue, log, "h1", priority=3)
    add(queue, log, "low")
    add(queue, log, "h2", priority=3)
    publish(queue, "a", "b", "c", "d")
    assert log == [("h1", "a"), ("h2", "b"), ("h1", "c"), ("h2", "d")]


def test_without_x_priority_consumers_round_robin_as_before() -> None:
    queue, log = Queue("q"), []
    add(queue, log, "c1")
    add(queue, log, "c2")
    publish(queue, "a", "b", "c")
    assert log == [("c1", "a"), ("c2", "b"), ("c1", "c")]


def test_a_blocked_high_priority_consumer_gets_the_next_message_once_it_has_room() -> None:
    queue, log = Queue("q"), []
    high = add(queue, log, "high", priority=1, prefetch=1)
    low = add(queue, log, "low", prefetch=1)
    publish(queue, "a", "b", "c")
    assert log == [("high", "a"), ("low", "b")]
    high.unacked = 0  # acked
    queue.unacked_count -= 1
    queue.drain(0)
    assert log[-1] == ("high", "c")
    assert low.unacked == 1


def test_removing_consumers_keeps_the_priority_index_consistent() -> None:
    queue, log = Queue("q"), []
    consumers = [add(queue, log, f"c{n}", priority=n % 3, prefetch=1) for n in range(9)]
    for consumer in consumers[::2]:
        queue.remove_consumer(consumer)
    publish(queue, "a", "b", "c", "d", "e")
    # left: c1 (1), c3 (0), c5 (2), c7 (1); one message each, highest priority first
    assert log == [("c5", "a"), ("c1", "b"), ("c7", "c"), ("c3", "d")]
    assert queue.ready_count == 1
    assert [c.tag for c in queue.consumers] == ["c1", "c3", "c5", "c7"]


def test_single_active_consumer_gets_everything_and_the_next_takes_over() -> None:
    queue, log = Queue("q", arguments={"x-single-active-consumer": True}), []
    first = add(queue, log, "first")
    add(queue, log, "second")
    add(queue, log, "third", priority=5)
    publish(queue, "a", "b")
    assert log == [("first", "a"), ("first", "b")]
    assert queue.consumers.active is first
    assert queue.remove_consumer(first) is True  # handed over: the caller drains
    publish(queue, "c")
    assert log[-1] == ("third", "c")  # the highest priority is next, not the oldest


def test_single_active_consumer_does_not_fall_back_when_the_active_one_is_full() -> None:
    queue, log = Queue("q", arguments={"x-single-active-consumer": True}), []
    add(queue, log, "active", prefetch=1)
    add(queue, log, "waiting")
    publish(queue, "a", "b")
    assert log == [("active", "a")]
    assert queue.ready_count == 1


def test_removing_a_waiting_consumer_hands_nothing_over() -> None:
    queue, log = Queue("q", arguments={"x-single-active-consumer": True}), []
    active = add(queue, log, "active")
    waiting = add(queue, log, "waiting")
    assert queue.remove_consumer(waiting) is False
    assert queue.consumers.active is active
    assert queue.remove_consumer(active) is False  # nobody left to take over
    assert queue.consumers.active is None


class CountingChannel(FakeChannel):
    """A FakeChannel that counts the room checks made on it: the work of choosing a consumer."""

    checks = 0

    def has_capacity(self, consumer: Consumer) -> bool:
        self.checks += 1
        return super().has_capacity(consumer)


def test_thousands_of_consumers_with_distinct_priorities_stay_bounded() -> None:
    """Hostile input: 2000 consumers, each its own priority, each filled in turn.

    Adding and removing is by index; choosing visits only the full consumers above the one
    chosen (O(consumers) per message at worst, as plain round-robin over full consumers is).
    Counted, not timed: the room checks. The cursor makes each message cost the one consumer
    that takes it and the full one above it, so about two checks per message; starting from
    the highest priority each time would be 2000 x 2001 / 2 checks.
    """
    queue, log = Queue("q"), []
    channel = CountingChannel(log)
    consumers = [
        add(queue, log, f"c{n}", priority=n, prefetch=1, channel=channel) for n in range(2000)
    ]
    publish(queue, *(str(n) for n in range(2001)))
    for consumer in consumers:
        queue.remove_consumer(consumer)
    assert log[0] == ("c1999", "0") and log[-1] == ("c0", "1999")
    assert (len(queue.consumers), queue.ready_count) == (0, 1)
    assert channel.checks <= 2 * 2001 + 2000, channel.checks


@pytest.mark.parametrize(
    ("value", "detail"),
    [("5", '"expected integer, got longstr"'), (True, '"expected integer, got bool"')],
)
def test_bad_x_priority_gets_rabbitmqs_406(value: Any, detail: str) -> None:
    with pytest.raises(errors.AMQPError) as caught:
        arguments.check_consumer_arguments("q", "/", {"x-priority": value})
    assert caught.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': {detail}"
    )


@pytest.mark.parametrize(("value", "kind"), [(1, "signedint"), ("true", "longstr")])
def test_x_single_active_consumer_must_be_a_boolean(value: Any, kind: str) -> None:
    with pytest.raises(errors.AMQPError) as caught:
        arguments.validate_queue_arguments("q", "/", {"x-single-active-consumer": value})
    assert caught.value.reply_text.endswith(
        f"'x-single-active-consumer' for queue 'q' in vhost '/': {{unacceptable_type,{kind}}}"
    )
