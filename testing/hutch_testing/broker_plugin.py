"""pytest fixtures for a test's hutch-broker: a fresh process, or a vhost on the module's broker.

Why one plugin: every folder of tests/ reaches hutch-broker through the same few fixtures
(``hutch_broker``, ``vhost``, ``connection``, ``channel``, ``api``), and whether a test gets a
broker of its own or a fresh vhost on a broker shared by its module is the module's choice, made
with one marker, not a conftest of its own. ``hutch_testing.vhosts`` says what sharing means and
what keeps a shared test honest; this module only wires it into fixtures:

- in a module marked ``shared_broker``, ``hutch_broker`` is a ``VhostBroker``: the module's broker
  (``shared_hutch``, started once, guest locked out of "/") seen through a vhost made for this
  test and deleted after it; ``vhost`` names it, ``connection`` opens on it, and ``api`` is a
  ``VhostManagement`` that defaults to it and refuses "/";
- a test marked ``own_broker`` and every test of an unmarked module get a fresh broker from
  ``hutch_broker_factory`` (``hutch_testing.pytest_plugin``), killed after the test: no test that
  uses this fixture is about shutdown (one that is stops the broker itself), and a kill is
  0.01 s where a graceful stop is 0.2 s or more under load.

Registered next to ``hutch_testing.pytest_plugin`` in tests/conftest.py. A conftest that defines a
fixture of the same name (the in-memory admin API's ``api``, the Web UI's) overrides it there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hutch_demo.management import Management, quote
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from hutch_testing import clients, levels, vhosts
from hutch_testing.brokers import HutchBroker

Broker = HutchBroker | vhosts.VhostBroker


def pytest_configure(config: pytest.Config) -> None:
    for line in vhosts.MARKERS:
        config.addinivalue_line("markers", line)


@pytest.fixture(scope="module")
@levels.broker_level
def shared_hutch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HutchBroker]:
    """The hutch-broker a ``shared_broker`` module's tests share, killed after the module."""
    broker = vhosts.start_shared(tmp_path_factory)
    yield broker
    broker.stop(graceful=False)  # a clean shutdown is not under test here


@pytest.fixture
@levels.broker_level
def hutch_broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """A fresh hutch-broker on loopback (empty data directory under tmp_path) killed after the
    test, or in a ``shared_broker`` module a fresh vhost on the module's broker, deleted after."""
    if vhosts.wants_shared(request):
        process = request.getfixturevalue("shared_hutch")
        with vhosts.fresh_vhost(process, request.node.originalname) as broker:
            yield broker
        return
    fresh: HutchBroker = request.getfixturevalue("hutch_broker_factory")()
    yield fresh
    fresh.stop(graceful=False)


@pytest.fixture
def vhost(hutch_broker: Broker) -> str:
    """The vhost the test's objects live in: "/" on a fresh broker, its own on a shared one."""
    return hutch_broker.vhost if isinstance(hutch_broker, vhosts.VhostBroker) else "/"


@pytest.fixture
def vhost_user(api: Management, vhost: str) -> Iterator[str]:
    """A user name of the test's own, named after its vhost (users are broker-wide, and a module
    may share its broker), deleted after the test; the test creates it and checks the 201."""
    name = f"user-{vhost}"
    yield name
    api.delete(f"/users/{quote(name)}")


@pytest.fixture
def connection(hutch_broker: Broker, vhost: str) -> Iterator[BlockingConnection]:
    """A pika connection to the test's broker and vhost, closed afterwards if still open."""
    conn = clients.connect(hutch_broker, vhost=vhost)
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection: BlockingConnection) -> BlockingChannel:
    return connection.channel()


@pytest.fixture
def api(hutch_broker: Broker) -> Management:
    """The management API of the test's broker, as guest; on a shared broker bound to the
    test's vhost (``vhosts.VhostManagement``). Where a conftest's ``api`` overrides this one,
    ``vhosts.management_for(hutch_broker)`` is the same client."""
    return vhosts.management_for(hutch_broker)
