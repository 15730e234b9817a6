"""Fixtures shared by the broker's tests."""

import pytest
from hutch_broker.config import BrokerConfig
from hutch_broker.server.app import BrokerServer
from hutch_demo import ports
from hutch_testing import levels


@pytest.fixture
@levels.broker_level
async def server(tmp_path):
    """A whole broker in this test's own event loop, on free ports, its data under tmp_path:
    for tests that must see the loop's turns or the store's files while the broker runs.
    ``stop`` is idempotent, so a test may stop it itself."""
    amqp_port, http_port = ports.free_ports(2)
    config = BrokerConfig(amqp_port=amqp_port, http_port=http_port, data_dir=tmp_path / "data")
    broker_server = BrokerServer(config)
    await broker_server.start()
    yield broker_server
    await broker_server.stop()
