"""Stream queues across kill -9 and restarts: nothing confirmed missing at its offset, offsets
never reused, retention by whole segments (issue 28, ST-4, ST-6).

Only hutch-broker restarts here: the side-by-side node is shared by the session. Consumers sit
at random offsets (seeded) with random prefetch while a publisher without confirms races the
kill, so the crash cuts a log with unsynced records in its buffer and readers mid-segment.
"""

import contextlib
import itertools
import random
import signal
import threading
import time

import pika
import pytest
from hutch_demo.management import Management
from hutch_demo.waiting import wait_for
from hutch_testing.clients import connect

STREAM = {"x-queue-type": "stream"}
CONFIRMED = 400


def _reader(broker, queue, offset, prefetch, seen):
    connection = connect(broker)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)

    def on_message(ch, method, properties, body):
        seen.append((properties.headers["x-stream-offset"], body))
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(queue, on_message, arguments={"x-stream-offset": offset})
    return connection


def _read_all(broker, queue, *, until):
    """Every (offset, body) from the first offset, read until ``until`` messages came."""
    seen: list[tuple[int, bytes]] = []
    connection = _reader(broker, queue, "first", 200, seen)
    wait_for(
        lambda: (connection.process_data_events(0.05), len(seen) >= until)[1],
        timeout=30,
        what=f"{until} messages",
    )
    connection.process_data_events(0.3)  # nothing more than what is there
    connection.close()
    return seen


def _in_thread(work):
    """Run ``work`` until the broker dies under it (the kill ends every connection)."""

    def run():
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            work()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_st_6_kill_9_loses_nothing_confirmed_and_reuses_no_offset(hutch_broker, seed):
    """The kill lands while a publisher (no confirms) and three readers (random offsets and
    prefetch, a tail reader among them) are busy: what a reader saw is where it saw it after the
    restart, every confirmed message is at its offset, and new messages take new offsets."""
    rng = random.Random(seed)
    publisher = connect(hutch_broker).channel()
    publisher.confirm_delivery()
    publisher.queue_declare("s", durable=True, arguments=STREAM)
    for k in range(CONFIRMED):
        publisher.basic_publish("", "s", f"c{k}".encode())  # confirmed: returns after the ack
    observed: list[list[tuple[int, bytes]]] = []
    threads = []
    for offset in [rng.randrange(CONFIRMED), rng.randrange(CONFIRMED), "next"]:
        seen: list[tuple[int, bytes]] = []
        observed.append(seen)
        reader = _reader(hutch_broker, "s", offset, rng.randint(1, 50), seen)
        threads.append(_in_thread(lambda reader=reader: reader.process_data_events(None)))
    racer = connect(hutch_broker).channel()  # no confirms: these race the kill

    def race():
        for j in itertools.count():
            racer.basic_publish("", "s", f"u{j}".encode())

    threads.append(_in_thread(race))
    time.sleep(rng.uniform(0.3, 1.0))

    hutch_broker.kill(signal.SIGKILL)
    for thread in threads:
        thread.join(timeout=10)
    hutch_broker.start()

    item = Management(hutch_broker).queue("s")
    count = item["messages"]
    assert count >= CONFIRMED
    after = _read_all(hutch_broker, "s", until=count)
    offsets = [offset for offset, _ in after]
    assert offsets == list(range(count))  # dense, from 0
    assert after[:CONFIRMED] == [(k, f"c{k}".encode()) for k in range(CONFIRMED)]
    racers = [body for _, body in after[CONFIRMED:]]
    assert racers == [f"u{j}".encode() for j in range(len(racers))]  # a prefix, in order
    by_offset = dict(after)
    assert observed[-1], "the tail reader got racing messages before the kill"
    for seen in observed:  # what a reader saw before the crash is still there, unchanged
        assert all(by_offset.get(offset) == body for offset, body in seen)
    # New messages continue after the last offset: none seen before the crash is reused.
    publisher = connect(hutch_broker).channel()
    publisher.confirm_delivery()
    publisher.basic_publish("", "s", b"after")
    seen_max = max(offset for seen in observed for offset, _ in seen)
    tail = _read_all(hutch_broker, "s", until=count + 1)[-1]
    assert tail == (count, b"after")
    assert tail[0] > seen_max
    assert (item["first_offset"], item["last_offset"], item["type"]) == (0, count - 1, "stream")


def test_st_4_retention_drops_whole_segments_and_survives_a_restart(hutch_broker):
    """x-max-length-bytes with small segments: the oldest segments go, whole, never the one
    being written; the first offset moves on and stays there across a restart."""
    channel = connect(hutch_broker).channel()
    channel.confirm_delivery()
    arguments = {
        **STREAM,
        "x-max-length-bytes": 20_000,
        "x-stream-max-segment-size-bytes": 5_000,
    }
    channel.queue_declare("r", durable=True, arguments=arguments)
    body = bytes(900)
    for _ in range(100):
        channel.basic_publish("", "r", body)
    api = Management(hutch_broker)
    item = api.queue("r")
    segments, first = item["segments"], item["first_offset"]
    assert item["last_offset"] == 99
    assert first > 0  # old segments were dropped
    kept = item["messages"]
    assert kept == 100 - first
    # Records are ~970 bytes, 6 to a segment: at most 20 kB kept, at least that less a segment.
    assert kept * 900 <= 20_000 < (kept + 12) * 1000
    assert segments == -(-kept // 6)
    reader = connect(hutch_broker).channel()
    reader.basic_qos(prefetch_count=1000)
    got = []
    reader.basic_consume(
        "r",
        lambda ch, m, p, b: got.append(p.headers["x-stream-offset"]),
        arguments={"x-stream-offset": 0},  # dropped: starts at the first offset held
    )
    wait_for(lambda: (reader.connection.process_data_events(0.05), got)[1], what="deliveries")
    reader.connection.process_data_events(0.3)
    assert got == list(range(first, 100))

    hutch_broker.kill(signal.SIGKILL)
    hutch_broker.start()

    after = Management(hutch_broker).queue("r")
    assert (after["first_offset"], after["last_offset"], after["segments"]) == (first, 99, segments)
    publisher = connect(hutch_broker).channel()
    publisher.confirm_delivery()
    publisher.basic_publish("", "r", body)
    assert Management(hutch_broker).queue("r")["last_offset"] == 100


def test_st_6_a_stream_and_its_arguments_come_back_after_sigterm(hutch_broker):
    channel = connect(hutch_broker).channel()
    channel.confirm_delivery()
    arguments = {**STREAM, "x-max-age": "7D"}
    channel.queue_declare("t", durable=True, arguments=arguments)
    channel.basic_publish("", "t", b"one", pika.BasicProperties(headers={"k": "v"}))
    hutch_broker.kill(signal.SIGTERM)
    hutch_broker.start()
    item = Management(hutch_broker).queue("t")
    assert (item["type"], item["arguments"], item["messages"]) == ("stream", arguments, 1)
    assert _read_all(hutch_broker, "t", until=1) == [(0, b"one")]
