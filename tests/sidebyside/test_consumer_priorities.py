"""Consumer priorities (`x-priority` on basic.consume) side by side with RabbitMQ 3.10.8.

Higher-priority consumers get messages while they have prefetch room, equal priorities take
turns, and a lower priority gets messages only while every higher one is blocked.
"""

import time

import pytest
from hutch_testing.steps import closed_by_broker, publish

pytestmark = pytest.mark.rabbitmq


class Deliveries:
    """Consumers on their own channels of one connection, recording (tag, body) in order."""

    def __init__(self, target, queue):
        self.connection = target.connect()
        self.queue = queue
        self.log = []
        self.channels = {}

    def consume(self, tag, *, prefetch=0, priority=None):
        channel = self.connection.channel()
        if prefetch:
            channel.basic_qos(prefetch_count=prefetch)
        arguments = {} if priority is None else {"x-priority": priority}

        def on_message(ch, method, _props, body):
            self.log.append((tag, body.decode()))

        channel.basic_consume(self.queue, on_message, consumer_tag=tag, arguments=arguments)
        self.channels[tag] = channel
        return channel

    def wait(self, count, settle=0.3):
        """Process events until ``count`` deliveries, then a little longer to catch extras."""
        deadline = time.monotonic() + 10
        while len(self.log) < count and time.monotonic() < deadline:
            self.connection.process_data_events(time_limit=0.05)
        self.connection.process_data_events(time_limit=settle)
        return self.log


def test_higher_priority_first_while_it_has_room_then_lower(target):
    q = target.name("q")
    target.channel().queue_declare(q)
    consumers = Deliveries(target, q)
    consumers.consume("low", priority=-5)
    high = consumers.consume("high", prefetch=2, priority=10)
    consumers.consume("default")
    consumers.wait(0, settle=0.1)
    ch = target.channel()
    for body in "abcd":
        publish(ch, q, body)

    assert consumers.wait(4) == [("high", "a"), ("high", "b"), ("default", "c"), ("default", "d")]
    high.basic_ack(0, multiple=True)
    high.basic_qos(prefetch_count=2)  # a round trip on that channel: the ack is processed
    publish(ch, q, "e")
    assert consumers.wait(5)[-1] == ("high", "e")


def test_equal_priorities_take_turns_and_the_lower_one_gets_nothing(target):
    q = target.name("q")
    target.channel().queue_declare(q)
    consumers = Deliveries(target, q)
    consumers.consume("h1", priority=3)
    consumers.consume("low")
    consumers.consume("h2", priority=3)
    consumers.wait(0, settle=0.1)
    ch = target.channel()
    for body in "abcd":
        publish(ch, q, body)

    assert sorted(consumers.wait(4)) == [("h1", "a"), ("h1", "c"), ("h2", "b"), ("h2", "d")]


@pytest.mark.parametrize(
    ("value", "detail"),
    [("5", '"expected integer, got longstr"'), (True, '"expected integer, got bool"')],
)
def test_a_non_integer_x_priority_is_refused(target, value, detail):
    q = target.name("q")
    ch = target.channel()
    ch.queue_declare(q)
    outcome = closed_by_broker(
        lambda: ch.basic_consume(q, lambda *_: None, arguments={"x-priority": value})
    )
    assert outcome == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{q}' in vhost '/': {detail}",
    )


def test_connection_start_advertises_consumer_priorities(target):
    capabilities = target.connection._impl.server_properties["capabilities"]
    assert capabilities["consumer_priorities"] is True
