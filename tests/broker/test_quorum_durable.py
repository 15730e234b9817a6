"""Quorum queues survive kill -9 and SIGTERM with every confirmed message (issue 14).

A quorum queue stores every message, whatever its delivery mode, as RabbitMQ's Raft log does;
a classic durable queue beside it keeps only the persistent ones (the control). The queue comes
back as a quorum queue with its limit, and a message held unacked at the crash comes back too.
Only hutch-broker restarts here: the side-by-side node is shared by the session.
"""

import signal

import pika
import pytest
from hutch_broker.model import quorum
from hutch_demo.management import Management
from hutch_testing.clients import connect
from hutch_testing.steps import get, publish

QUORUM = {"x-queue-type": "quorum", "x-delivery-limit": 5}
TRANSIENT, PERSISTENT = 1, 2


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_quorum_queue_keeps_every_confirmed_message_across_a_restart(hutch_broker, stop):
    connection = connect(hutch_broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("qq", durable=True, arguments=QUORUM)
    channel.queue_declare("cq", durable=True)
    for index, mode in enumerate([TRANSIENT, PERSISTENT, TRANSIENT, PERSISTENT]):
        for queue in ("qq", "cq"):
            publish(channel, queue, f"m{index}", delivery_mode=mode)
    held = get(channel, "qq", auto_ack=False)  # unacked when the broker goes down

    hutch_broker.kill(stop)
    hutch_broker.start()

    after = connect(hutch_broker).channel()
    bodies = {queue: _drain(after, queue) for queue in ("qq", "cq")}
    item = Management(hutch_broker).queue("qq")

    assert held[2] == b"m0"
    assert sorted(bodies["qq"]) == [b"m0", b"m1", b"m2", b"m3"]
    assert bodies["cq"] == [b"m1", b"m3"]  # the control: transient messages die with the process
    assert (item["type"], item["durable"], item["arguments"]) == ("quorum", True, QUORUM)


def _drain(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> list[bytes]:
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2])
    return found


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_the_delivery_count_survives_a_restart(hutch_broker, stop):
    """One return before the restart and two after exceed a limit of 2: dead-lettered.

    A crash can lose only returns made after the last group commit: the message then comes
    back with a lower count, never goes missing.
    """
    channel = connect(hutch_broker).channel()
    channel.confirm_delivery()
    _declare_limited(channel, "poison")
    for body in ("p", "q"):
        publish(channel, "poison", body, delivery_mode=TRANSIENT)
    _return_each(channel, "poison", 2)  # p, then q: each returned once, back in that order
    # A return is written at once and made durable by the next group commit, as an ack is:
    # the confirm of a later persistent publish says that commit has happened.
    channel.queue_declare("marker", durable=True)
    publish(channel, "marker", "m", delivery_mode=PERSISTENT)

    hutch_broker.kill(stop)
    hutch_broker.start()

    after = connect(hutch_broker).channel()
    seen = _return_each(after, "poison", 6)
    dead = _drain(after, "dlq")

    assert seen == [(b"p", 1), (b"q", 1), (b"p", 2), (b"q", 2)]
    assert dead == [b"p", b"q"]


def _declare_limited(channel, queue: str) -> None:
    """A quorum queue with a delivery limit of 2 that dead-letters into ``dlq``."""
    channel.queue_declare("dlq", durable=True)
    arguments = {
        "x-queue-type": "quorum",
        "x-delivery-limit": 2,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "dlq",
    }
    channel.queue_declare(queue, durable=True, arguments=arguments)


def _return_each(channel, queue: str, limit: int) -> list[tuple[bytes, int]]:
    """basic.get and nack with requeue, up to ``limit`` times: (body, x-delivery-count) seen."""
    seen = []
    for _ in range(limit):
        got = get(channel, queue, auto_ack=False)
        if got is None:
            break
        seen.append((got[2], got[1].headers["x-delivery-count"]))
        channel.basic_nack(got[0].delivery_tag, requeue=True)
        channel.queue_declare(queue, passive=True)  # a round trip: the nack is processed
    return seen


def test_a_publishers_delivery_count_headers_never_count_as_attempts(hutch_broker):
    """A publisher sets x-delivery-count (and the store's own count header) on a message in a
    quorum queue with a delivery limit of 2. Across a restart the message still gets its
    three attempts; no consumer ever sees the store's header.

    Before the store kept the count under a header of its own, the restart read the
    publisher's 50 as 50 returns and dead-lettered the message at its first return.
    """
    channel = connect(hutch_broker).channel()
    channel.confirm_delivery()
    _declare_limited(channel, "forged")
    headers = {"x-delivery-count": 50, quorum.STORED_COUNT: 40, "app": "kept"}
    publish(channel, "forged", "f", delivery_mode=PERSISTENT, headers=headers)
    publish(channel, "forged", "g", delivery_mode=PERSISTENT, headers=headers)
    _return_each(channel, "forged", 1)  # f returned once: its record re-written with count 1
    publish(channel, "forged", "sync", delivery_mode=PERSISTENT)  # the return is committed

    hutch_broker.kill(signal.SIGKILL)
    hutch_broker.start()

    after = connect(hutch_broker).channel()
    seen = []
    for _ in range(8):
        got = get(after, "forged", auto_ack=False)
        if got is None:
            break
        assert quorum.STORED_COUNT not in got[1].headers
        if got[2] == b"sync":
            after.basic_ack(got[0].delivery_tag)
            continue
        assert got[1].headers["app"] == "kept"
        seen.append((got[2], got[1].headers["x-delivery-count"]))
        after.basic_nack(got[0].delivery_tag, requeue=True)
        after.queue_declare("forged", passive=True)
    assert seen == [(b"g", 0), (b"f", 1), (b"g", 1), (b"f", 2), (b"g", 2)]
    assert _drain(after, "dlq") == [b"f", b"g"]
