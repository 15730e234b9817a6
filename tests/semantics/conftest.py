"""Fixtures for the behaviour-contract tests: pika, HTTP, and a confirm-mode channel.

Every test here observes hutch-broker the way a client does (AMQP over loopback with pika, the
management API over HTTP) and carries its contract ID (docs/contracts/broker.md) first in its
name. The broker fixtures (``hutch_broker``, ``vhost``, ``connection``, ``api``) are
``hutch_testing.broker_plugin``'s: a fresh broker per test, or in a module marked
``shared_broker`` a fresh vhost per test on one broker per module.
"""

import pytest
from hutch_testing.steps import confirm_channel
from pika.adapters.blocking_connection import BlockingChannel


@pytest.fixture
def confirms(connection) -> BlockingChannel:
    """A second channel on the same connection, in confirm mode."""
    return confirm_channel(connection)
