"""Helpers for the broker tests that use real clients over real loopback sockets."""

from collections.abc import Iterator

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection


def connect(
    broker,
    *,
    user: str = "guest",
    password: str = "guest",
    vhost: str = "/",
    heartbeat: int | None = None,
    **kwargs,
) -> BlockingConnection:
    params = pika.ConnectionParameters(
        host="127.0.0.1",
        port=broker.amqp_port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password),
        heartbeat=heartbeat,
        connection_attempts=1,
        blocked_connection_timeout=None,
        **kwargs,
    )
    return pika.BlockingConnection(params)


@pytest.fixture
def connection(hutch_broker) -> Iterator[BlockingConnection]:
    conn = connect(hutch_broker)
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection) -> BlockingChannel:
    return connection.channel()


def drain(channel: BlockingChannel, queue: str, limit: int = 10_000) -> list[bytes]:
    """basic.get (auto-ack) until empty: the queue's ready bodies in order."""
    bodies = []
    for _ in range(limit):
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    return bodies
