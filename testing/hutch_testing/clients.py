"""Small pika helpers shared by the broker tests (real clients over real sockets)."""

from __future__ import annotations

from typing import Any, Protocol, TypedDict

import pika
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection


class AmqpReachable(Protocol):
    """A broker on 127.0.0.1 (a launcher, the chain's Endpoint, a test's stand-in)."""

    @property
    def amqp_port(self) -> int: ...


class ConnectOptions(TypedDict, total=False):
    """``connect``'s keyword arguments that wrappers (sidebyside.Target) pass through."""

    user: str
    password: str
    vhost: str
    heartbeat: int | None
    client_properties: dict[str, Any]  # pika's, sent in connection.start-ok


def connect(
    broker: AmqpReachable,
    *,
    user: str = "guest",
    password: str = "guest",  # noqa: S107 - RabbitMQ's default, loopback only
    vhost: str = "/",
    heartbeat: int | None = None,
    **kwargs: object,  # more pika.ConnectionParameters
) -> BlockingConnection:
    """A blocking pika connection to ``broker`` (anything with ``amqp_port``)."""
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


def drain(channel: BlockingChannel, queue: str, limit: int = 10_000) -> list[bytes]:
    """basic.get (auto-ack) until empty: the queue's ready bodies in order."""
    bodies = []
    for _ in range(limit):
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    return bodies
