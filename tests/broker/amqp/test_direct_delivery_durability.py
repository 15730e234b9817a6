"""Confirmed messages handed straight to consumers survive restarts of both kinds (P-3).

The case that used to lose data: a manual-ack consumer with room is attached, so every
persistent publish is delivered at once instead of being queued; the publisher gets its
confirms; the consumer goes away without acking (the messages are requeued); the broker
restarts. Each test fails if a direct delivery skips the write or its confirm skips the fsync.
"""

import signal

import pika
import pytest
from hutch_testing.clients import connect, drain

PERSISTENT = pika.BasicProperties(delivery_mode=2)
RESTARTS = ["kill -9", "SIGTERM"]


def restart(broker, how: str) -> None:
    if how == "kill -9":
        broker.kill(signal.SIGKILL)
        broker.start()
    else:
        broker.restart()


def consume_without_acking(channel, queue: str, count: int) -> list[bytes]:
    """Take ``count`` deliveries on a manual-ack consumer and ack none."""
    received: list[bytes] = []
    for _method, _props, body in channel.consume(queue, auto_ack=False, inactivity_timeout=5):
        assert body is not None, f"only {len(received)} of {count} delivered"
        received.append(body)
        if len(received) == count:
            break
    return received


def publish_confirmed(broker, queue: str, bodies: list[bytes], *, tx: bool = False) -> None:
    conn = connect(broker)
    ch = conn.channel()
    if tx:
        ch.tx_select()
    else:
        ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", queue, body, PERSISTENT, mandatory=True)  # raises unless acked
    if tx:
        ch.tx_commit()
    conn.close()


@pytest.mark.parametrize("how", RESTARTS)
@pytest.mark.parametrize("goes_away", ["channel closed", "still holding them"])
def test_confirmed_direct_deliveries_survive_a_restart(hutch_broker, how, goes_away):
    setup = connect(hutch_broker).channel()
    setup.queue_declare("orders", durable=True)
    consumer_conn = connect(hutch_broker)
    consumer = consumer_conn.channel()
    consumer.basic_consume("orders", lambda *_: None, auto_ack=False)  # room: no prefetch
    consumer_conn.process_data_events(0)
    bodies = [b"order-%d" % n for n in range(5)]
    publish_confirmed(hutch_broker, "orders", bodies)
    consumer.close()
    consumer = consumer_conn.channel()
    assert consume_without_acking(consumer, "orders", 5) == bodies
    if goes_away == "channel closed":
        consumer.close()  # requeued, not acked
        assert setup.queue_declare("orders", passive=True).method.message_count == 5
    restart(hutch_broker, how)
    ch = connect(hutch_broker).channel()
    assert sorted(drain(ch, "orders")) == bodies


@pytest.mark.parametrize("how", RESTARTS)
def test_a_committed_transaction_delivered_at_once_survives_a_restart(hutch_broker, how):
    setup = connect(hutch_broker).channel()
    setup.queue_declare("orders", durable=True)
    consumer_conn = connect(hutch_broker)
    consumer = consumer_conn.channel()
    bodies = [b"tx-%d" % n for n in range(5)]
    publish_confirmed(hutch_broker, "orders", [b"warm-up"])
    assert consume_without_acking(consumer, "orders", 1) == [b"warm-up"]  # the consumer waits
    publish_confirmed(hutch_broker, "orders", bodies, tx=True)
    assert consume_without_acking(consumer, "orders", 5) == bodies
    restart(hutch_broker, how)
    ch = connect(hutch_broker).channel()
    assert sorted(drain(ch, "orders")) == sorted([b"warm-up", *bodies])


def test_acked_direct_deliveries_stay_acked_after_kill(hutch_broker):
    setup = connect(hutch_broker).channel()
    setup.queue_declare("orders", durable=True)
    consumer = connect(hutch_broker).channel()
    publish_confirmed(hutch_broker, "orders", [b"first"])
    (first,) = consume_without_acking(consumer, "orders", 1)
    bodies = [b"acked-%d" % n for n in range(5)]
    publish_confirmed(hutch_broker, "orders", bodies)
    received = []
    for method, _props, body in consumer.consume("orders", inactivity_timeout=5):
        assert method is not None
        consumer.basic_ack(method.delivery_tag)
        received.append(body)
        if len(received) == 5:
            break
    consumer.queue_declare("orders", passive=True)  # a round trip: the acks were processed
    setup.queue_declare("orders", passive=True)
    hutch_broker.kill(signal.SIGKILL)
    hutch_broker.start()
    ch = connect(hutch_broker).channel()
    left = drain(ch, "orders")
    assert first in left, "the unacked one is back"
    # An ack not yet synced may bring a message back (a redelivery), never lose one.
    assert set(left) <= {first, *bodies}
