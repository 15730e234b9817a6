"""Fixtures for the behaviour-contract tests: a fresh hutch-broker per test, pika and HTTP.

Every test here observes hutch-broker the way a client does (AMQP over loopback with pika, the
management API over HTTP) and carries its contract ID (docs/contracts/broker.md) first in its
name.
"""

from collections.abc import Iterator

import pytest
from hutch_demo.management import Management
from hutch_testing.brokers import HutchBroker
from hutch_testing.steps import confirm_channel
from pika.adapters.blocking_connection import BlockingChannel


@pytest.fixture
def hutch_broker(hutch_broker_factory) -> Iterator[HutchBroker]:
    """The plugin's fresh broker, killed rather than shut down cleanly after the test.

    No test here is about shutdown, and skipping the graceful stop keeps the suite fast.
    """
    broker = hutch_broker_factory()
    yield broker
    broker.stop(graceful=False)


@pytest.fixture
def confirms(connection) -> BlockingChannel:
    """A second channel on the same connection, in confirm mode."""
    return confirm_channel(connection)


@pytest.fixture
def api(hutch_broker) -> Management:
    return Management(hutch_broker)
