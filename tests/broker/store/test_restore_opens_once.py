"""A restart opens each durable queue's log once: its declare opens (and recovers) it, and the
restore of its messages reads that same log.

Before, the restore asked the message store for the log again (``open_queue``), a second
lookup under the store's lock for an object the queue already held, and one that would have
opened a second log over the same directory had the first been closed in between. In process,
with real clients and two real starts over the same data directory.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pika
import pytest
from hutch_broker.config import BrokerConfig
from hutch_broker.server.app import BrokerServer
from hutch_broker.store import MessageStore
from hutch_demo import ports

pytestmark = pytest.mark.broker

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _config(data_dir: Path) -> BrokerConfig:
    amqp_port, http_port = ports.free_ports(2)
    return BrokerConfig(amqp_port=amqp_port, http_port=http_port, data_dir=data_dir)


def _fill(port: int) -> None:
    """A classic queue and a stream, both durable, with confirmed persistent messages."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("q", durable=True)
        channel.queue_declare("s", durable=True, arguments={"x-queue-type": "stream"})
        for n in range(5):
            channel.basic_publish("", "q", b"q%d" % n, PERSISTENT)
        for n in range(3):
            channel.basic_publish("", "s", b"s%d" % n, PERSISTENT)
    finally:
        connection.close()


def _drain(port: int, queue: str) -> list[bytes]:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        channel = connection.channel()
        bodies = []
        while True:
            method, _, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return bodies
            bodies.append(body)
    finally:
        connection.close()


async def test_a_restart_opens_each_durable_log_once(tmp_path: Path, monkeypatch) -> None:
    data_dir = tmp_path / "data"
    first = BrokerServer(_config(data_dir))
    await first.start()
    try:
        await asyncio.to_thread(_fill, first.config.amqp_port)
    finally:
        await first.stop()

    second = BrokerServer(_config(data_dir))
    opened: Counter[tuple[str, str]] = Counter()
    open_queue = MessageStore.open_queue

    def counted(store: MessageStore, vhost: str, queue: str):  # type: ignore[no-untyped-def]
        if store is second.store:
            opened[(vhost, queue)] += 1
        return open_queue(store, vhost, queue)

    monkeypatch.setattr(MessageStore, "open_queue", counted)
    await second.start()
    try:
        assert opened == {("/", "q"): 1, ("/", "s"): 1}
        queues = second.broker.vhosts["/"].queues
        assert queues["q"].ready_count == 5
        assert queues["s"].index.next_offset == 3  # type: ignore[attr-defined]
        bodies = await asyncio.to_thread(_drain, second.config.amqp_port, "q")
        assert bodies == [b"q%d" % n for n in range(5)]
    finally:
        await second.stop()
