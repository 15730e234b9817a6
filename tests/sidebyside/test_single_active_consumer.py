"""Single active consumer (`x-single-active-consumer`) side by side with RabbitMQ 3.10.8.

One consumer at a time gets deliveries; when it cancels or its channel or connection closes, the
next one takes over, after the closed channel's unacked messages went back in order. A cancel
hands over at once: neither broker waits until the cancelled consumer's unacked messages are
settled. The management API shows which one is active.
"""

import time

import pytest
from hutch_demo.waiting import wait_for
from hutch_testing.steps import closed_by_broker, publish

pytestmark = pytest.mark.rabbitmq

SAC = {"x-single-active-consumer": True}


class Consumers:
    """Consumers on their own connections, recording (tag, body, redelivered) in order."""

    def __init__(self, target, queue):
        self.target = target
        self.queue = queue
        self.log = []
        self.connections = {}
        self.channels = {}

    def consume(self, tag, *, priority=None, prefetch=0):
        connection = self.target.connect()
        channel = connection.channel()
        if prefetch:
            channel.basic_qos(prefetch_count=prefetch)
        arguments = {} if priority is None else {"x-priority": priority}

        def on_message(_ch, method, _props, body):
            self.log.append((tag, body.decode(), method.redelivered))

        channel.basic_consume(self.queue, on_message, consumer_tag=tag, arguments=arguments)
        self.connections[tag], self.channels[tag] = connection, channel
        return channel

    def wait(self, count, settle=0.3):
        deadline = time.monotonic() + 10
        while len(self.log) < count and time.monotonic() < deadline:
            for connection in self.connections.values():
                if connection.is_open:
                    connection.process_data_events(time_limit=0.02)
        for connection in self.connections.values():
            if connection.is_open:
                connection.process_data_events(time_limit=settle)
        return self.log


def _declare(target, *, quorum=False):
    q = target.name("q")
    if quorum:
        target.channel().queue_declare(q, durable=True, arguments={**SAC, "x-queue-type": "quorum"})
    else:
        target.channel().queue_declare(q, arguments=SAC)
    return q


def test_only_the_first_consumer_gets_messages(target):
    q = _declare(target)
    consumers = Consumers(target, q)
    consumers.consume("first")
    consumers.consume("second")
    ch = target.channel()
    for body in "abc":
        publish(ch, q, body)

    assert consumers.wait(3) == [("first", b, False) for b in "abc"]


def test_the_next_consumer_takes_over_after_a_cancel(target):
    q = _declare(target)
    consumers = Consumers(target, q)
    first = consumers.consume("first", prefetch=1)
    consumers.consume("second")
    ch = target.channel()
    publish(ch, q, "a")
    publish(ch, q, "b")  # waits: the active consumer is full, the other one is not active
    consumers.wait(1)
    first.basic_cancel("first")  # "a" stays unacked on its channel
    handed = [("first", "a", False), ("second", "b", False)]
    handed = target.expect("sac-cancel-handover", hutch=handed, rabbitmq=handed[:1])
    assert consumers.wait(len(handed)) == handed  # at the cancel, before any other event
    publish(ch, q, "c")

    later = target.expect("sac-cancel-handover", hutch=[("second", "c", False)], rabbitmq=[])
    assert consumers.wait(len(handed) + len(later)) == handed + later
    # 3.10.8's queue process crashed delivering "c" and restarted empty: "b", the confirmed
    # "c" and both consumers are gone. Hutch holds nothing ready and keeps "second".
    left = ch.queue_declare(q, passive=True).method
    assert (left.message_count, left.consumer_count) == target.expect(
        "sac-cancel-handover", hutch=(0, 1), rabbitmq=(0, 0)
    )


def test_unacked_messages_of_a_cancelled_consumer_do_not_hold_back_the_next_one(target):
    """3.10.8 activates the next consumer at the cancel, while the old channel still holds
    unacked messages; it does not wait until they are settled. Acking them later changes
    nothing, a requeued one goes to the new active consumer."""
    q = _declare(target)
    consumers = Consumers(target, q)
    first = consumers.consume("first")
    consumers.consume("second")
    ch = target.channel()
    publish(ch, q, "a")
    publish(ch, q, "b")
    consumers.wait(2)
    first.basic_cancel("first")  # "a" and "b" stay unacked on its channel
    publish(ch, q, "c")
    assert consumers.wait(3)[2:] == [("second", "c", False)]  # before any settlement

    first.basic_ack(1)
    first.basic_nack(2, requeue=True)
    # The nack travels on the first consumer's connection, "d" on another: neither broker
    # orders the two, so "d" is published once the requeued "b" has reached "second".
    assert consumers.wait(4)[3:] == [("second", "b", True)]
    publish(ch, q, "d")
    assert consumers.wait(5)[3:] == [("second", "b", True), ("second", "d", False)]


@pytest.mark.parametrize("prefetch", [1, 2])
def test_a_quorum_queue_hands_ready_messages_to_the_next_consumer_at_the_cancel(target, prefetch):
    """What Hutch does for every queue type; 3.10.8's classic queues differ (see the
    "sac-cancel-handover" difference), its quorum queues do not."""
    q = _declare(target, quorum=True)
    consumers = Consumers(target, q)
    first = consumers.consume("first", prefetch=prefetch)
    consumers.consume("second")
    ch = target.channel()
    for body in "abc":
        publish(ch, q, body)
    held = list(consumers.wait(prefetch))
    first.basic_cancel("first")  # its deliveries stay unacked on its channel

    handed = [("second", body, False) for body in "abc"[prefetch:]]
    assert consumers.wait(prefetch + len(handed)) == held + handed
    publish(ch, q, "d")
    assert consumers.wait(prefetch + len(handed) + 1)[-1] == ("second", "d", False)


def test_after_a_cancel_with_nothing_ready_the_next_consumer_gets_new_messages(target):
    q = _declare(target)
    consumers = Consumers(target, q)
    first = consumers.consume("first")
    consumers.consume("second")
    ch = target.channel()
    publish(ch, q, "a")
    consumers.wait(1)
    first.basic_cancel("first")
    publish(ch, q, "b")

    assert consumers.wait(2) == [("first", "a", False), ("second", "b", False)]


def test_a_closed_channel_s_unacked_messages_go_to_the_next_consumer_in_order(target):
    q = _declare(target)
    consumers = Consumers(target, q)
    consumers.consume("first")
    consumers.consume("second")
    ch = target.channel()
    for body in "abc":
        publish(ch, q, body)
    consumers.wait(3)
    consumers.channels["first"].close()
    # pika cancels the consumer before it closes the channel, so RabbitMQ requeues "a".."c" on
    # the channel's exit, in the queue's own process, after close-ok: "d" is published once
    # they have reached "second".
    assert consumers.wait(6)[3:] == [
        ("second", "a", True),
        ("second", "b", True),
        ("second", "c", True),
    ]
    publish(ch, q, "d")

    assert consumers.wait(7)[3:] == [
        ("second", "a", True),
        ("second", "b", True),
        ("second", "c", True),
        ("second", "d", False),
    ]


def test_a_closed_connection_hands_over_too(target):
    q = _declare(target)
    consumers = Consumers(target, q)
    consumers.consume("first")
    consumers.consume("second")
    consumers.wait(0, settle=0.1)
    consumers.connections["first"].close()
    publish(target.channel(), q, "a")

    assert consumers.wait(1) == [("second", "a", False)]


def test_a_newcomer_with_a_higher_priority_does_not_take_over(target):
    q = _declare(target)
    consumers = Consumers(target, q)
    consumers.consume("first")
    consumers.consume("second", priority=10)
    consumers.consume("third", priority=5)
    publish(target.channel(), q, "a")
    consumers.wait(1)
    consumers.channels["first"].basic_cancel("first")
    publish(target.channel(), q, "b")

    assert consumers.wait(2) == [("first", "a", False), ("second", "b", False)]


def test_management_api_shows_the_active_consumer(target):
    q = _declare(target)
    consumers = Consumers(target, q)
    consumers.consume("first")
    consumers.consume("second")
    consumers.wait(0, settle=0.1)

    def details():
        item = target.api.queue(q)
        found = sorted(
            (c["consumer_tag"], c["active"], c["activity_status"])
            for c in item.get("consumer_details", [])
        )
        return item.get("single_active_consumer_tag"), found

    expected = ("first", [("first", True, "single_active"), ("second", False, "waiting")])
    wait_for(details, lambda found: found == expected, what="consumer details", timeout=15)
    assert target.api.queue(q)["arguments"] == SAC


def test_plain_queue_consumers_are_all_active_and_up(target):
    q = target.name("q")
    target.channel().queue_declare(q)
    consumers = Consumers(target, q)
    consumers.consume("only")
    consumers.wait(0, settle=0.1)

    def details():
        item = target.api.queue(q)
        found = [(c["active"], c["activity_status"]) for c in item.get("consumer_details", [])]
        return item.get("single_active_consumer_tag"), found

    wait_for(details, lambda found: found == (None, [(True, "up")]), what="details", timeout=15)


@pytest.mark.parametrize(("value", "kind"), [(1, "signedint"), ("true", "longstr")])
def test_a_non_boolean_value_is_refused(target, value, kind):
    q = target.name("q")
    ch = target.channel()
    outcome = closed_by_broker(
        lambda: ch.queue_declare(q, arguments={"x-single-active-consumer": value})
    )
    assert outcome == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue '{q}' in vhost "
        f"'/': {{unacceptable_type,{kind}}}",
    )


def test_redeclare_compares_the_flag(target):
    q = _declare(target)
    ch = target.channel()
    outcome = closed_by_broker(
        lambda: ch.queue_declare(q, arguments={"x-single-active-consumer": False})
    )
    assert outcome == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-single-active-consumer' for queue '{q}' in "
        "vhost '/': received 'false' but current is 'true'",
    )
