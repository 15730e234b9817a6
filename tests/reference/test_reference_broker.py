"""Smoke test of the reference broker every side-by-side test relies on.

Why: the behaviour contract marks what RabbitMQ 3.10.8 does; if the node the `rabbitmq` fixture
starts were another version, or could not carry a message, every comparison would be wrong.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import hutch_testing.rabbitmq
import pika
import pytest

pytestmark = pytest.mark.rabbitmq


def test_reference_node_is_rabbitmq_3_10_8(rabbitmq: hutch_testing.rabbitmq.RabbitMQ) -> None:
    overview = rabbitmq.overview()

    assert overview is not None
    assert overview["rabbitmq_version"] == "3.10.8"
    assert overview["node"] == rabbitmq.node_name


def test_reference_node_listens_on_loopback_only(rabbitmq: hutch_testing.rabbitmq.RabbitMQ) -> None:
    # The management API reports its listener as "::" whatever it binds, so ask the kernel.
    ports = {rabbitmq.amqp_port, rabbitmq.http_port, rabbitmq.dist_port}

    listening = _listening_addresses(ports)

    assert set(listening) == ports
    assert all(addresses == {"0100007F"} for addresses in listening.values())


def _listening_addresses(ports: set[int]) -> dict[int, set[str]]:
    """Local addresses (hex, as in /proc/net/tcp*) of the LISTEN sockets on `ports`."""
    found: dict[int, set[str]] = {}
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        for line in table.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port = local.rsplit(":", 1)
            if state == "0A" and int(port, 16) in ports:
                found.setdefault(int(port, 16), set()).add(address)
    return found


def test_pika_publishes_and_gets_on_the_reference_node(
    rabbitmq: hutch_testing.rabbitmq.RabbitMQ,
) -> None:
    queue = f"reference.smoke.{uuid.uuid4().hex}"
    body = b"hello from hutch"
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq.amqp_url))
    try:
        channel = connection.channel()
        channel.queue_declare(queue=queue, exclusive=True)
        channel.confirm_delivery()
        channel.basic_publish(exchange="", routing_key=queue, body=body)
        method, _properties, received = channel.basic_get(queue=queue, auto_ack=True)
    finally:
        connection.close()

    assert method is not None
    assert method.routing_key == queue
    assert received == body
