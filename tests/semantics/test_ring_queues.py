"""Ring queues (RING-1..RING-7), Artemis semantics, with the contract's seed examples."""

import pytest
from hutch_demo.waiting import wait_for
from hutch_testing.clients import connect
from hutch_testing.steps import ACK, closed_by_broker, get, publish, publish_all, ready

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test

TO_DLQ = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}


def _bodies(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2])
    return found


def _consume(channel):
    """Start a consumer (manual ack); returns the list its deliveries are appended to."""
    got = []
    channel.basic_consume("q", lambda _c, method, _p, body: got.append((method, body)))
    return got


def _dead(channel):
    found = []
    while (got := get(channel, "dlq")) is not None:
        found.append((got[2], got[1].headers["x-death"][0]["reason"]))
    return found


# -- RING-1 ------------------------------------------------------------------------------------


def test_ring_1_policy_ring_size_applies_only_to_queues_without_the_argument(channel, api):
    api.set_policy("ring", "^ring-", {"ring-size": 2})
    channel.queue_declare("ring-by-policy")
    channel.queue_declare("ring-by-argument", arguments={"x-ring-size": 4})

    for queue in ("ring-by-policy", "ring-by-argument"):
        publish_all(channel, queue, [str(i) for i in range(6)])

    assert _bodies(channel, "ring-by-policy") == [b"4", b"5"]
    assert _bodies(channel, "ring-by-argument") == [b"2", b"3", b"4", b"5"]
    assert api.queue("ring-by-policy")["effective_policy_definition"] == {"ring-size": 2}


def test_ring_1_operator_policy_ring_size_the_lesser_wins(channel, api):
    api.set_policy("ops", "^ring-", {"ring-size": 3}, operator=True)
    channel.queue_declare("ring-capped", arguments={"x-ring-size": 5})
    channel.queue_declare("ring-tighter", arguments={"x-ring-size": 2})

    for queue in ("ring-capped", "ring-tighter"):
        publish_all(channel, queue, [str(i) for i in range(6)])

    assert _bodies(channel, "ring-capped") == [b"3", b"4", b"5"]
    assert _bodies(channel, "ring-tighter") == [b"4", b"5"]


def test_ring_1_ring_size_below_one_is_refused(connection, api, vhost):
    response = api.put_policy("ring", ".*", {"ring-size": 0})
    declared = closed_by_broker(
        lambda: connection.channel().queue_declare("q", arguments={"x-ring-size": 0})
    )

    assert response.status == 400
    assert response.body["reason"] == "Validation failed\n\n0 is not a valid ring size\n"
    assert declared == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-ring-size' for queue 'q' in vhost '{vhost}': "
        "{value_zero,0}",
    )


# -- RING-2 ------------------------------------------------------------------------------------


def test_ring_2_unacked_messages_never_count_and_are_never_removed(channel):
    channel.queue_declare("q", arguments={"x-ring-size": 2})
    publish_all(channel, "q", ["A", "B"])
    held, _props, _body = get(channel, "q", auto_ack=False)

    publish(channel, "q", "C")
    assert ready(channel, "q") == 2
    publish(channel, "q", "D")

    channel.basic_ack(held.delivery_tag)  # A is still a valid delivery
    assert _bodies(channel, "q") == [b"C", b"D"]


# -- RING-3 ------------------------------------------------------------------------------------


def test_ring_3_publish_to_a_full_ring_removes_exactly_one_head(channel, confirms):
    channel.queue_declare("dlq")
    channel.queue_declare("q", arguments={"x-ring-size": 3, **TO_DLQ})

    outcomes = publish_all(confirms, "q", ["A", "B", "C", "D"])

    assert outcomes == [ACK] * 4
    assert _bodies(channel, "q") == [b"B", b"C", b"D"]
    assert _dead(channel) == [(b"A", "maxlen")]


def test_ring_3_direct_delivery_to_a_waiting_consumer_removes_nothing(connection, channel):
    channel.queue_declare("q", arguments={"x-ring-size": 1})
    consumer = connection.channel()

    delivered = _consume(consumer)
    publish_all(channel, "q", ["A", "B", "C"])
    wait_for(
        lambda: connection.process_data_events(0.02) or delivered,
        lambda items: len(items) == 3,
        what="three deliveries",
    )

    assert [body for _method, body in delivered] == [b"A", b"B", b"C"]


# -- RING-4 ------------------------------------------------------------------------------------


def test_ring_4_seed_four_in_delivery_then_the_consumer_closes(hutch_broker, vhost, channel):
    channel.queue_declare("dlq")
    channel.queue_declare("q", arguments={"x-ring-size": 3, **TO_DLQ})
    consumer_connection = connect(hutch_broker, vhost=vhost)
    got = _consume(consumer_connection.channel())
    publish_all(channel, "q", ["A", "B", "C", "D"])
    wait_for(
        lambda: consumer_connection.process_data_events(0.02) or got,
        lambda items: len(items) == 4,
        what="four deliveries",
    )

    consumer_connection.close()

    wait_for(lambda: ready(channel, "q"), lambda count: count == 3, what="requeue")
    assert _bodies(channel, "q") == [b"B", b"C", b"D"]
    assert _dead(channel) == [(b"A", "maxlen")]


def test_ring_4_requeue_into_a_full_ring_drops_the_requeued_message(channel):
    channel.queue_declare("dlq")
    channel.queue_declare("q", arguments={"x-ring-size": 2, **TO_DLQ})
    publish(channel, "q", "A")
    held, _props, _body = get(channel, "q", auto_ack=False)
    publish_all(channel, "q", ["B", "C"])

    channel.basic_nack(held.delivery_tag, requeue=True)

    assert _bodies(channel, "q") == [b"B", b"C"]
    assert _dead(channel) == [(b"A", "maxlen")]


# -- RING-5 ------------------------------------------------------------------------------------


def test_ring_5_messages_ready_plus_unacked_may_exceed_the_ring_size(channel, api):
    channel.queue_declare("q", arguments={"x-ring-size": 2})
    publish_all(channel, "q", ["A", "B"])
    for _ in range(2):
        get(channel, "q", auto_ack=False)
    publish_all(channel, "q", ["C", "D", "E"])

    queue = api.queue("q")

    assert (queue["messages_ready"], queue["messages_unacknowledged"]) == (2, 2)
    assert queue["messages"] == 4


# -- RING-6 ------------------------------------------------------------------------------------


def test_ring_6_lowering_the_ring_size_deletes_nothing_at_once(channel, api):
    api.set_policy("ring", "^q$", {"ring-size": 5})
    channel.queue_declare("q")
    publish_all(channel, "q", [str(i) for i in range(5)])

    api.set_policy("ring", "^q$", {"ring-size": 2})
    assert ready(channel, "q") == 5
    publish(channel, "q", "5")

    assert ready(channel, "q") == 5  # one in, one out: the queue does not grow
    assert get(channel, "q")[2] == b"1"
    assert get(channel, "q")[2] == b"2"
    assert get(channel, "q")[2] == b"3"
    publish(channel, "q", "6")  # ready 2 >= 2: still one out per publish
    assert _bodies(channel, "q") == [b"5", b"6"]


# -- RING-7 ------------------------------------------------------------------------------------


def test_ring_7_the_ring_step_runs_before_the_length_limit(channel, confirms):
    channel.queue_declare(
        "q", arguments={"x-ring-size": 2, "x-max-length": 2, "x-overflow": "reject-publish"}
    )

    outcomes = publish_all(confirms, "q", ["A", "B", "C"])

    assert outcomes == [ACK, ACK, ACK]  # the ring made room, so the limit never rejected
    assert _bodies(channel, "q") == [b"B", b"C"]


def test_ring_7_a_lower_max_length_still_applies_after_the_ring(channel, confirms):
    channel.queue_declare("dlq")
    channel.queue_declare("q", arguments={"x-ring-size": 3, "x-max-length": 1, **TO_DLQ})

    outcomes = publish_all(confirms, "q", ["A", "B", "C"])

    assert outcomes == [ACK] * 3
    assert _bodies(channel, "q") == [b"C"]
    assert _dead(channel) == [(b"A", "maxlen"), (b"B", "maxlen")]
