"""Recovery keeps an index, not bodies; a body is read back when its message reaches the head.

Before, recovery decoded every record with its body and the broker held them all, so a restart
needed as much memory as the queues held on disk (isolation case 6). These tests pin the
structural property (no body is held after recovery, in the store or in the queue) and what
happens when a body cannot be read back later (not served, not lost).
"""

from __future__ import annotations

import logging
import signal
import time
import tracemalloc

import pika
import pytest
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Queue
from hutch_broker.store import MessageStore, records, segments
from hutch_demo.management import Management
from hutch_testing.clients import connect

MIB = 1024 * 1024


def test_recovery_allocates_no_body(open_store, fields, read_back):
    """Recover 32 MiB of bodies: the heap holds one segment file at a time, then the index."""
    segment = 1 * MIB  # two 512 KiB records a segment
    store = open_store(segment_size=segment)
    queue = store.open_queue("/", "q")
    count, size = 64, 512 * 1024
    ids = [queue.append(**fields(index, body_size=size)) for index in range(count)]
    store.close()

    tracemalloc.start()
    try:
        reopened = open_store(segment_size=segment)
        recovered = reopened.open_queue("/", "q").recover()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 2 * segment, (
        f"recovering {count * size // MIB} MiB peaked at {peak / MIB:.1f} MiB"
    )
    assert held < MIB / 4, f"recovered {count * size // MIB} MiB, holding {held / MIB:.1f} MiB"
    assert [message.msg_id for message in recovered] == ids
    assert {message.body_size for message in recovered} == {size}
    reopened.close()
    again = open_store(segment_size=segment).open_queue("/", "q")
    assert [message.body for message in read_back(again)] == [
        fields(index, body_size=size)["body"] for index in range(count)
    ]


def _restored_queue(store: MessageStore) -> Queue:
    """What ``BrokerServer._restore`` builds: body-less entries over the recovered log."""
    queue = Queue("q", durable=True)
    queue.store = store.open_queue("/", "q")
    for stored in queue.store.recover():
        message = Message(stored.exchange, stored.routing_key, stored.raw_properties, b"")
        entry = Entry(0, message, expire_at=stored.expire_at_ms, store_id=stored.msg_id)
        queue.restore(entry, body_size=stored.body_size)
    return queue


def test_an_unreadable_body_is_not_served_and_stays_on_disk(
    data_dir, fields, fill, caplog: pytest.LogCaptureFixture
):
    first = MessageStore(data_dir)
    ids = fill(first.open_queue("/", "q"), 3, body_size=100)
    first.close()
    store = MessageStore(data_dir)
    queue = _restored_queue(store)
    assert queue.ready_count == 3
    assert queue.ready_bytes == 300
    assert all(entry.paged for entry in queue.ready_entries())
    _damage_body(queue, ids[1])  # damaged on disk after it was verified at start-up

    with caplog.at_level(logging.ERROR):
        served = [queue.get(0, no_ack=True) for _ in range(3)]

    assert [entry.message.body if entry else None for entry in served] == [
        fields(0, body_size=100)["body"],
        fields(2, body_size=100)["body"],
        None,
    ]
    assert (queue.ready_count, queue.ready_bytes) == (0, 0)
    assert any(f"{ids[1]:#x} not delivered" in record.message for record in caplog.records)
    store.close()
    reopened = MessageStore(data_dir)  # the damaged record was never acked: start-up sees it
    try:
        assert [message.msg_id for message in reopened.open_queue("/", "q").recover()] == []
    finally:
        reopened.close()
    assert list((data_dir / "quarantine").iterdir()), "the damaged segment was set aside"


def _damage_body(queue: Queue, msg_id: int) -> None:
    number, offset = records.split_msg_id(msg_id)
    path = queue.store.directory / segments.segment_name(number)  # type: ignore[union-attr]
    with path.open("r+b") as file:
        file.seek(offset + 80)
        byte = file.read(1)[0]
        file.seek(offset + 80)
        file.write(bytes([byte ^ 0x01]))


def test_an_expired_head_with_an_unreadable_body_takes_nobody_with_it(data_dir, fields, fill):
    first = MessageStore(data_dir)
    ids = fill(first.open_queue("/", "q"), 2, body_size=100)  # expires in 2027, never
    first.close()
    store = MessageStore(data_dir)
    queue = _restored_queue(store)
    _damage_body(queue, ids[0])

    assert queue.expire_head(1_900_000_000_000) == 0  # it left, unread: not an expiry

    assert (queue.ready_count, queue.ready_bytes) == (1, 100)
    entry = queue.get(1_900_000_000_000, no_ack=True)
    assert entry is not None and entry.message.body == fields(1, body_size=100)["body"]
    store.close()


def test_a_restarted_broker_holds_no_body_until_delivery(hutch_broker):
    """The management API's messages_ram counts messages whose body is in memory."""
    count = 200
    connection = connect(hutch_broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("q", durable=True)
    for n in range(count):
        properties = pika.BasicProperties(delivery_mode=2, message_id=str(n))
        channel.basic_publish("", "q", b"%d" % n * 1000, properties)
    connection.close()
    hutch_broker.kill(signal.SIGKILL)
    hutch_broker.start()

    queue = Management(hutch_broker).queue("q")
    assert (queue["messages"], queue["messages_ram"], queue["message_bytes_ram"]) == (count, 0, 0)
    assert queue["message_bytes"] == sum(len(b"%d" % n * 1000) for n in range(count))

    channel = connect(hutch_broker).channel()
    for n in range(count):
        method, properties, body = channel.basic_get("q", auto_ack=True)
        assert method is not None and method.redelivered
        assert (properties.message_id, body) == (str(n), b"%d" % n * 1000)
    assert channel.basic_get("q")[0] is None


def test_recovered_bodies_come_back_for_expiry_dead_lettering_and_priorities(hutch_broker):
    """Every way out of a queue reads the body back: TTL at the head into a dead-letter
    exchange, and a priority queue's levels, rebuilt from the stored content headers (a guard
    for the body-less entries: the bodies were in memory before, so this passed then too)."""
    connection = connect(hutch_broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.exchange_declare("dlx", "fanout", durable=True)
    channel.queue_declare("dead", durable=True)
    channel.queue_bind("dead", "dlx")
    # 8 s: the messages must outlive the publishes, a SIGKILL, a restart and a management query
    # (the 4 s this was left little room for a restart on a loaded machine, 1.4-2.1 s).
    channel.queue_declare(
        "ttl", durable=True, arguments={"x-message-ttl": 8000, "x-dead-letter-exchange": "dlx"}
    )
    channel.queue_declare("prio", durable=True, arguments={"x-max-priority": 5})
    for n in range(5):
        persistent = pika.BasicProperties(delivery_mode=2, priority=n % 3 * 2)
        channel.basic_publish("", "ttl", b"ttl %d " % n * 500, persistent)
        channel.basic_publish("", "prio", b"prio %d " % n * 500, persistent)
    connection.close()
    hutch_broker.kill(signal.SIGKILL)
    hutch_broker.start()

    waiting = Management(hutch_broker).queue("ttl")
    assert (waiting["messages"], waiting["messages_ram"]) == (5, 0), "expired before the restart"
    channel = connect(hutch_broker).channel()
    served = [channel.basic_get("prio", auto_ack=True) for _ in range(5)]
    assert [(props.priority, body) for _, props, body in served] == [
        (n % 3 * 2, b"prio %d " % n * 500) for n in (2, 1, 4, 0, 3)
    ]
    deadline = time.monotonic() + 20
    while Management(hutch_broker).queue("dead")["messages"] < 5:
        assert time.monotonic() < deadline, "the recovered messages did not expire"
        time.sleep(0.1)
    dead = [channel.basic_get("dead", auto_ack=True)[2] for _ in range(5)]
    assert dead == [b"ttl %d " % n * 500 for n in range(5)]
