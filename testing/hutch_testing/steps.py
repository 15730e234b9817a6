"""Client steps shared by the semantics and side-by-side suites (blocking pika).

Why: the tests read as the contract does ("publish 1, 2, 3 -> the queue holds 3"), so the pika
plumbing for "what did the publisher get back", "what closed the channel" and "what is ready"
lives here once, and both brokers are driven by exactly the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pika
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import (
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    NackError,
    UnroutableError,
)

ACK, NACK, RETURNED = "ack", "nack", "returned"


def publish(
    channel: BlockingChannel,
    routing_key: str,
    body: bytes | str,
    *,
    exchange: str = "",
    mandatory: bool = False,
    **properties: object,  # pika.BasicProperties fields
) -> str:
    """basic.publish; on a confirm channel returns ACK, NACK or RETURNED (returned, then acked).

    Without confirms it returns ACK once the frame is written.
    """
    if isinstance(body, str):
        body = body.encode()
    props = pika.BasicProperties(**properties) if properties else None
    try:
        channel.basic_publish(exchange, routing_key, body, props, mandatory=mandatory)
    except NackError:
        return NACK
    except UnroutableError:
        return RETURNED
    return ACK


def publish_all(
    channel: BlockingChannel,
    routing_key: str,
    bodies: Iterable[bytes | str],
    *,
    exchange: str = "",
    mandatory: bool = False,
    **properties: object,
) -> list[str]:
    """``publish`` of each body with the same arguments."""
    return [
        publish(channel, routing_key, body, exchange=exchange, mandatory=mandatory, **properties)
        for body in bodies
    ]


def confirm_channel(connection: BlockingConnection) -> BlockingChannel:
    channel = connection.channel()
    channel.confirm_delivery()
    return channel


def closed_by_broker(action: Callable[[], object]) -> tuple[int, str]:
    """Run ``action``, which must make the broker close the channel or connection: (code, text)."""
    try:
        action()
    except (ChannelClosedByBroker, ConnectionClosedByBroker) as error:
        return error.reply_code, error.reply_text
    raise AssertionError("the broker did not close the channel")


def get(
    channel: BlockingChannel, queue: str, *, auto_ack: bool = True
) -> tuple[pika.spec.Basic.GetOk, pika.BasicProperties, bytes] | None:
    """basic.get: (method, properties, body) or None when the queue is empty."""
    method, properties, body = channel.basic_get(queue, auto_ack=auto_ack)
    return None if method is None else (method, properties, body)


def ready(channel: BlockingChannel, queue: str) -> int:
    """Ready messages, from a passive queue.declare (Q-1)."""
    return int(channel.queue_declare(queue, passive=True).method.message_count)
