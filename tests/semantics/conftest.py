"""Fixtures for the behaviour-contract tests: a hutch-broker per test or per module, pika and HTTP.

Every test here observes hutch-broker the way a client does (AMQP over loopback with pika, the
management API over HTTP) and carries its contract ID (docs/contracts/broker.md) first in its
name.

A broker start costs 1.4-2.1 s on a loaded CI machine, so a module marked ``shared_broker`` runs
all its tests on one broker, each test in a fresh vhost of its own that is deleted after it
(deleting a vhost deletes its queues, exchanges and policies and closes its connections), so
tests never see each other's objects. To keep a test in such a module from passing by looking at
the wrong place, the shared broker refuses the default vhost "/": guest has no permissions there
and ``api`` refuses a path under it. A test that restarts or stops the broker, changes broker-wide
settings, or counts objects or connections broker-wide is marked ``own_broker`` and gets a fresh
broker as before; so does every test of an unmarked module.
"""

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hutch_demo.management import Management, Response, quote
from hutch_testing import clients, levels
from hutch_testing.brokers import HutchBroker
from hutch_testing.steps import confirm_channel
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

SHARED = "shared_broker"
OWN = "own_broker"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{SHARED}: the module's tests share one hutch-broker, a fresh vhost each"
    )
    config.addinivalue_line("markers", f"{OWN}: this test needs a hutch-broker of its own")


@dataclass(frozen=True)
class VhostBroker:
    """The module's shared broker as one test sees it: the same process, the test's vhost."""

    process: HutchBroker
    vhost: str

    @property
    def amqp_port(self) -> int:
        return self.process.amqp_port

    @property
    def http_url(self) -> str:
        return self.process.http_url

    @property
    def credentials(self) -> tuple[str, str]:
        return self.process.credentials


class VhostManagement(Management):
    """``Management`` for a test on the shared broker: shortcuts default to the test's vhost, and
    a path under the default vhost "/" is an error, not an empty (and vacuously passing) answer."""

    def __init__(self, broker: VhostBroker) -> None:
        super().__init__(broker)
        self.vhost = broker.vhost

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Response:
        if "/%2F/" in path or path.endswith("/%2F"):
            raise AssertionError(
                f"{method} {path}: this test runs in vhost {self.vhost!r} on a shared broker"
            )
        return super().request(method, path, body, headers)

    def queue(self, name: str, vhost: str | None = None) -> dict[str, Any]:
        return super().queue(name, vhost or self.vhost)

    def queue_exists(self, name: str, vhost: str | None = None) -> bool:
        return super().queue_exists(name, vhost or self.vhost)

    def put_policy(  # type: ignore[override]  # same call, the test's vhost by default
        self, name: str, pattern: str, definition: dict[str, Any], **kwargs: Any
    ) -> Response:
        kwargs.setdefault("vhost", self.vhost)
        return super().put_policy(name, pattern, definition, **kwargs)

    def delete_policy(
        self, name: str, *, vhost: str | None = None, operator: bool = False
    ) -> Response:
        return super().delete_policy(name, vhost=vhost or self.vhost, operator=operator)


def _shared(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker(SHARED) is not None and (
        request.node.get_closest_marker(OWN) is None
    )


@pytest.fixture(scope="module")
@levels.broker_level
def module_hutch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HutchBroker]:
    """The module's hutch-broker, with guest's permissions on "/" removed (see the docstring)."""
    work_dir: Path = tmp_path_factory.mktemp("hutch")
    broker = HutchBroker(work_dir=work_dir, data_dir=work_dir / "data").start()
    revoked = Management(broker).delete("/permissions/%2F/guest")
    assert revoked.status == 204, revoked
    yield broker
    broker.stop(graceful=False)  # a clean shutdown is not under test here


@pytest.fixture
@levels.broker_level
def hutch_broker(request: pytest.FixtureRequest) -> Iterator[HutchBroker | VhostBroker]:
    """A fresh broker killed after the test, or in a ``shared_broker`` module a fresh vhost on
    the module's broker, deleted after the test.

    No test here is about shutdown, and skipping the graceful stop keeps the suite fast.
    """
    if not _shared(request):
        broker = request.getfixturevalue("hutch_broker_factory")()
        yield broker
        broker.stop(graceful=False)
        return
    process: HutchBroker = request.getfixturevalue("module_hutch")
    admin = Management(process)
    name = f"t-{request.node.originalname.removeprefix('test_')[:40]}-{secrets.token_hex(3)}"
    created = admin.put(f"/vhosts/{quote(name)}", {})
    assert created.status == 201, created  # also gives guest full permissions there
    yield VhostBroker(process, name)
    deleted = admin.delete(f"/vhosts/{quote(name)}")
    assert deleted.status == 204, deleted


@pytest.fixture
def vhost(hutch_broker: HutchBroker | VhostBroker) -> str:
    """The vhost the test's objects live in: "/" on a fresh broker, its own on a shared one."""
    return getattr(hutch_broker, "vhost", "/")


@pytest.fixture
def connection(hutch_broker: HutchBroker | VhostBroker, vhost: str) -> Iterator[BlockingConnection]:
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
def api(hutch_broker: HutchBroker | VhostBroker) -> Management:
    if isinstance(hutch_broker, VhostBroker):
        return VhostManagement(hutch_broker)
    return Management(hutch_broker)
