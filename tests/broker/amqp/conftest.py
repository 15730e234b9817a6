"""Fixtures for the broker tests that use real clients over real loopback sockets."""

from collections.abc import Iterator

import pytest
from hutch_testing.clients import connect
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection


@pytest.fixture
def connection(hutch_broker) -> Iterator[BlockingConnection]:
    conn = connect(hutch_broker)
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection) -> BlockingChannel:
    return connection.channel()
