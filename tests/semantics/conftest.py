"""Fixtures for the behaviour-contract tests: a hutch-broker per test or per module, pika and HTTP.

Every test here observes hutch-broker the way a client does (AMQP over loopback with pika, the
management API over HTTP) and carries its contract ID (docs/contracts/broker.md) first in its
name.

A module marked ``shared_broker`` runs its tests on one broker, each in a fresh vhost of its own
(``hutch_testing.vhosts``, which says why and what keeps such a test honest); a test marked
``own_broker`` and every test of an unmarked module get a fresh broker as before.
"""

from collections.abc import Iterator

import pytest
from hutch_demo.management import Management
from hutch_testing import clients, levels, vhosts
from hutch_testing.brokers import HutchBroker
from hutch_testing.steps import confirm_channel
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection


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
    """A fresh broker killed after the test, or in a ``shared_broker`` module a fresh vhost on
    the module's broker, deleted after the test.

    No test here is about shutdown, and skipping the graceful stop keeps the suite fast.
    """
    if vhosts.wants_shared(request):
        with vhosts.fresh_vhost(
            request.getfixturevalue("module_hutch"), request.node.originalname
        ) as vb:
            yield vb
        return
    broker = request.getfixturevalue("hutch_broker_factory")()
    yield broker
    broker.stop(graceful=False)


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


@pytest.fixture
def confirms(connection) -> BlockingChannel:
    """A second channel on the same connection, in confirm mode."""
    return confirm_channel(connection)


@pytest.fixture
def api(hutch_broker: HutchBroker | vhosts.VhostBroker) -> Management:
    if isinstance(hutch_broker, vhosts.VhostBroker):
        return vhosts.VhostManagement(hutch_broker)
    return Management(hutch_broker)
