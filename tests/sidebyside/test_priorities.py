"""Priority queues (`x-max-priority`) side by side with RabbitMQ 3.10.8 (issue 14).

A Celery worker with `task_queue_max_priority` declares one at start-up; the order of delivery,
the validation texts and the interplay with limits, TTL, dead-lettering and requeue are what a
client observes, so each is asserted on both brokers with the same pika steps.
"""

import pika
import pytest
from hutch_demo.waiting import wait_for
from hutch_testing.steps import ACK, NACK, closed_by_broker, get, publish

pytestmark = pytest.mark.rabbitmq


def _bodies(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2].decode())
    return found


def _publish(channel, queue, pairs, **props):
    """Publish (body, priority) pairs; priority None sends no priority property."""
    outcomes = []
    for body, priority in pairs:
        extra = {} if priority is None else {"priority": priority}
        outcomes.append(publish(channel, queue, body, **extra, **props))
    return outcomes


MIXED = [("a", None), ("b", 3), ("c", 0), ("d", 5), ("e", 3), ("f", 9), ("g", 200)]


def test_highest_priority_first_fifo_within_none_is_zero_above_max_is_max(target):
    ch = target.channel()
    q = target.name("q")
    ch.queue_declare(q, arguments={"x-max-priority": 5})
    _publish(ch, q, MIXED)

    assert ch.queue_declare(q, passive=True).method.message_count == 7
    assert _bodies(ch, q) == ["d", "f", "g", "b", "e", "a", "c"]


def test_a_consumer_receives_in_priority_order(target):
    ch = target.channel()
    q = target.name("q")
    ch.queue_declare(q, arguments={"x-max-priority": 10})
    _publish(ch, q, MIXED)
    received = []
    for method, _, body in ch.consume(q, inactivity_timeout=2):
        if method is None:
            break
        received.append(body.decode())
        ch.basic_ack(method.delivery_tag)
        if len(received) == len(MIXED):
            break
    ch.cancel()

    assert received == ["g", "f", "d", "b", "e", "a", "c"]


def test_requeued_messages_keep_their_place_by_priority(target):
    ch = target.channel()
    q = target.name("q")
    ch.queue_declare(q, arguments={"x-max-priority": 9})
    _publish(ch, q, [("l1", 1), ("h1", 9), ("h2", 9), ("l2", 1)])
    taken = [get(ch, q, auto_ack=False) for _ in range(3)]  # h1 h2 l1
    publish(ch, q, "h3", priority=9)
    ch.basic_nack(taken[-1][0].delivery_tag, multiple=True, requeue=True)

    got = []
    while (item := get(ch, q)) is not None:
        got.append((item[2].decode(), item[0].redelivered))
    assert got == [("h1", True), ("h2", True), ("h3", False), ("l1", True), ("l2", False)]


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (256, "{max_value_exceeded,256}"),
        (-1, "{value_negative,-1}"),
        ("5", '"expected integer, got longstr"'),
        (True, '"expected integer, got bool"'),
    ],
)
def test_bad_x_max_priority_is_refused_with_rabbitmqs_text(target, value, detail):
    q = target.name("q")
    ch = target.channel()
    outcome = closed_by_broker(lambda: ch.queue_declare(q, arguments={"x-max-priority": value}))
    assert outcome == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '{q}' in vhost '/': "
        f"{detail}",
    )
    assert not target.api.queue_exists(q)


def test_x_max_priority_bounds_and_redeclare_equivalence(target):
    ch = target.channel()
    for value in (0, 1, 255):
        ch.queue_declare(target.name(f"p{value}"), arguments={"x-max-priority": value})
    q = target.name("p1")
    different = closed_by_broker(lambda: ch.queue_declare(q, arguments={"x-max-priority": 2}))
    ch = target.channel()
    missing = closed_by_broker(lambda: ch.queue_declare(q))

    prefix = f"PRECONDITION_FAILED - inequivalent arg 'x-max-priority' for queue '{q}' in vhost '/'"
    assert different == (406, f"{prefix}: received '2' but current is '1'")
    assert missing == (
        406,
        f"{prefix}: received none but current is the value '1' of type 'signedint'",
    )


def test_max_priority_is_not_a_policy_key(target):
    response = target.api.put_policy(target.name("pol"), target.anchored("q"), {"max-priority": 5})
    assert response.status == 400
    assert "max-priority" in response.body["reason"]
    assert "are not recognised policy settings" in response.body["reason"]


def test_drop_head_drops_the_highest_priority_message_and_dead_letters_it(target):
    ch = target.channel()
    q, dlq = target.name("q"), target.name("dlq")
    ch.queue_declare(dlq)
    ch.queue_declare(
        q,
        arguments={
            "x-max-priority": 9,
            "x-max-length": 2,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dlq,
        },
    )
    _publish(ch, q, [("a", 1), ("b", 5), ("c", 1)])
    wait_for(lambda: _ready(ch, dlq), lambda n: n == 1, what="one dead letter")

    assert (_bodies(ch, q), _bodies(ch, dlq)) == (["a", "c"], ["b"])


def test_reject_publish_counts_all_priorities(target):
    ch = target.channel()
    q = target.name("q")
    args = {"x-max-priority": 9, "x-max-length": 2, "x-overflow": "reject-publish"}
    ch.queue_declare(q, arguments=args)

    outcomes = _publish(ch, q, [("a", 1), ("b", 2), ("c", 9)])
    assert outcomes == [ACK, ACK, NACK]
    assert _bodies(ch, q) == ["b", "a"]


def test_expired_messages_are_dead_lettered_and_never_delivered(target):
    ch = target.channel()
    q, dlq = target.name("q"), target.name("dlq")
    ch.queue_declare(dlq)
    args = {"x-max-priority": 5, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
    ch.queue_declare(q, arguments=args)
    publish(ch, q, "high-short", priority=5, expiration="50")
    publish(ch, q, "low-long", priority=1)
    wait_for(lambda: _ready(ch, dlq), lambda n: n == 1, what="the expired message", timeout=5)

    assert _bodies(ch, q) == ["low-long"]
    (_, props, body) = get(ch, dlq)
    assert (body, props.priority, props.headers["x-death"][0]["reason"]) == (
        b"high-short",
        5,
        "expired",
    )


def test_management_api_shows_arguments_and_counts(target):
    ch = target.channel()
    q = target.name("q")
    ch.queue_declare(q, durable=True, arguments={"x-max-priority": 4})
    _publish(ch, q, [("a", 1), ("b", 4), ("c", None)], delivery_mode=2)
    get(ch, q, auto_ack=False)

    def counts():
        item = target.api.queue(q)
        return item["arguments"], item.get("messages"), item.get("messages_ready")

    wait_for(counts, lambda found: found[1:] == (3, 2), what="stats", timeout=15)
    assert counts() == ({"x-max-priority": 4}, 3, 2)


def _ready(channel, queue):
    return channel.queue_declare(queue, passive=True).method.message_count


def test_priority_reaches_the_consumer_unchanged(target):
    ch = target.channel()
    q = target.name("q")
    ch.queue_declare(q, arguments={"x-max-priority": 3})
    publish(ch, q, "x", priority=250)
    (_, props, _) = get(ch, q)
    assert props.priority == 250
    assert isinstance(props, pika.BasicProperties)
