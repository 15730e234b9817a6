"""Fixtures for the AMQP tests: a hutch-broker per test or, in a ``shared_broker`` module, one
per module with a fresh vhost per test (``hutch_testing.vhosts`` says why and what keeps such a
test honest). A test marked ``own_broker`` and every test of an unmarked module get the plugin's
fresh broker as before."""

from collections.abc import Iterator

import pytest
from hutch_testing import clients, levels, vhosts
from hutch_testing.brokers import HutchBroker
from pika.adapters.blocking_connection import BlockingConnection


def pytest_configure(config: pytest.Config) -> None:
    for line in vhosts.MARKERS:
        config.addinivalue_line("markers", line)


@pytest.fixture(scope="module")
@levels.broker_level
def module_hutch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HutchBroker]:
    """The module's shared hutch-broker, killed after the module."""
    broker = vhosts.start_shared(tmp_path_factory)
    yield broker
    broker.stop(graceful=False)  # a clean shutdown is not under test here


@pytest.fixture
@levels.broker_level
def hutch_broker(request: pytest.FixtureRequest) -> Iterator[HutchBroker | vhosts.VhostBroker]:
    """The plugin's fresh broker, or in a ``shared_broker`` module a fresh vhost on the module's
    broker, deleted after the test."""
    if vhosts.wants_shared(request):
        process = request.getfixturevalue("module_hutch")
        with vhosts.fresh_vhost(process, request.node.originalname) as broker:
            yield broker
        return
    yield request.getfixturevalue("hutch_broker_factory")()


@pytest.fixture
def vhost(hutch_broker: HutchBroker | vhosts.VhostBroker) -> str:
    """The vhost the test's objects live in: "/" on a fresh broker, its own on a shared one."""
    return getattr(hutch_broker, "vhost", "/")


@pytest.fixture
def connection(
    hutch_broker: HutchBroker | vhosts.VhostBroker, vhost: str
) -> Iterator[BlockingConnection]:
    """A pika connection to the test's broker and vhost, closed afterwards if still open."""
    conn = clients.connect(hutch_broker, vhost=vhost)
    yield conn
    if conn.is_open:
        conn.close()
