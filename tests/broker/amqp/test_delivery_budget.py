"""What a consumer is sent while its unacked bodies are held, and bodies read back whole.

On a real hutch-broker, with a consumer that reads its socket only when told
(``hutch_testing.rawconsumer``): transient bodies stay in memory for redelivery, so a
connection's budget (1/8 of the watermark) stops its deliveries whatever the prefetch, and
acks let the rest through; a persistent body dropped from memory once sent comes back whole
from the store on a requeue, a dead-lettering and a quorum queue's return.

Why a module of its own: these count deliveries and compare bodies, no clock and no memory
figure, so they run in the broker level's parallel pass; the memory figures beside a stuck
consumer are test_delivery_memory.py, in the serial pass (hutch_testing.serial).
"""

import time

import pika
import pytest
from hutch_demo.management import Management
from hutch_testing.rawconsumer import MiB, RawConsumer, body_for, publish, start_broker


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_unacked_transient_bodies_stop_at_the_connection_budget(hutch_broker_factory, tmp_path):
    """Transient bodies must stay in memory for redelivery: the connection's budget (1/8 of
    the watermark) stops deliveries, however large the prefetch; acks let the rest through,
    and a closed channel's messages come back whole, in order."""
    watermark, count, size = 256 * MiB, 24, 4 * MiB
    budget = watermark // 8
    broker = start_broker(hutch_broker_factory, tmp_path, watermark)
    publish(broker, "transient", count, size, persistent=False)
    consumer = RawConsumer(broker.amqp_port)
    consumer.consume("transient", prefetch=50)
    held = budget // size  # deliveries stop once held bytes reach the budget
    first = [body for _, _, body in consumer.deliveries(held)]
    assert consumer.nothing_more(1.0), f"more than {held} x 4 MiB unacked were delivered"
    assert first == [body_for(n, size) for n in range(held)]
    consumer.ack(2, multiple=True)  # 8 MiB released: two more come
    more = [body for _, _, body in consumer.deliveries(2)]
    assert more == [body_for(n, size) for n in range(held, held + 2)]
    assert consumer.nothing_more(1.0)
    consumer.close()  # everything unacked goes back, whole
    api = Management(broker)
    deadline = time.monotonic() + 10
    while api.queue("transient")["messages_unacknowledged"] and time.monotonic() < deadline:
        time.sleep(0.05)
    again = RawConsumer(broker.amqp_port)
    again.consume("transient")
    received = []
    for tag, redelivered, body in again.deliveries(count - 2):
        received.append((redelivered, body))
        again.ack(tag)
    expected = [(n < held + 2, body_for(n, size)) for n in range(2, count)]
    assert received == expected
    again.close()


def test_stored_bodies_dropped_once_sent_come_back_whole(hutch_broker):
    """A persistent body is dropped from memory once its delivery is encoded; a requeue, a
    dead-lettering and a quorum queue's return read it back from the store."""
    size = 64 * 1024
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", hutch_broker.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("dead", durable=True)
    ch.queue_declare(
        "work",
        durable=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
    )
    ch.queue_declare("quorum", durable=True, arguments={"x-queue-type": "quorum"})
    persistent = pika.BasicProperties(delivery_mode=2)
    for n in range(6):
        ch.basic_publish("", "work", body_for(n, size), persistent)
        ch.basic_publish("", "quorum", body_for(n, size), persistent)
    ch.basic_qos(prefetch_count=6)
    got: list[tuple[str, int, bytes]] = []

    def on_message(channel, method, _properties, body):
        got.append((method.routing_key, method.delivery_tag, body))

    ch.basic_consume("work", on_message)
    ch.basic_consume("quorum", on_message)
    while len(got) < 12:
        conn.process_data_events(time_limit=1)
    work = [(tag, body) for key, tag, body in got if key == "work"]
    quorum = [(tag, body) for key, tag, body in got if key == "quorum"]
    assert [body for _, body in work] == [body_for(n, size) for n in range(6)]
    for tag, _ in work[:3]:
        ch.basic_reject(tag, requeue=False)  # dead-lettered
    for tag, _ in quorum:
        ch.basic_nack(tag, requeue=True)  # back to the quorum queue, delivered again
    conn.process_data_events(time_limit=0.5)
    ch.close()  # the other 3 of "work" are requeued
    ch = conn.channel()
    dead = [ch.basic_get("dead", auto_ack=True)[2] for _ in range(3)]
    assert dead == [body_for(n, size) for n in range(3)]
    again = [ch.basic_get("work", auto_ack=True) for _ in range(3)]
    assert [(method.redelivered, body) for method, _, body in again] == [
        (True, body_for(n, size)) for n in range(3, 6)
    ]
    returned = [ch.basic_get("quorum", auto_ack=True)[2] for _ in range(6)]
    assert sorted(returned) == sorted(body_for(n, size) for n in range(6))
    conn.close()
