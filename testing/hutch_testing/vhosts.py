"""One hutch-broker per test module, a fresh vhost per test: the pieces the fixtures share.

Why: a hutch-broker start costs 1.4-2.1 s on a loaded CI machine, and most broker-level tests only
need objects nobody else sees, not a process of their own. A module marked ``shared_broker``
runs its tests on one broker, each in a vhost of its own that is deleted after the test
(deleting a vhost deletes its queues, exchanges and policies and closes its connections).

To keep such a test from passing by looking at the wrong place, the shared broker refuses the
default vhost "/": guest has no permissions there, and ``VhostManagement`` refuses a path under
it, so a connection or a management call left on "/" fails instead of returning an empty answer.
A test that restarts or stops the broker, changes broker-wide settings (limits, a user other tests
could see), or counts objects or connections broker-wide is marked ``own_broker`` and gets a fresh
broker; a user named after the test's vhost and deleted after it (the `vhost_user` fixture) is
the test's own, as its vhost is.

The fixtures built on these pieces are ``hutch_testing.broker_plugin``'s.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from hutch_demo.management import Management, Response, quote

from hutch_testing.brokers import HutchBroker

SHARED = "shared_broker"
OWN = "own_broker"
MARKERS = (
    f"{SHARED}: the module's tests share one hutch-broker, a fresh vhost each",
    f"{OWN}: this test needs a hutch-broker of its own (restart, users, broker-wide counts)",
)


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

    @property
    def amqp_url(self) -> str:
        """The AMQP URI of the test's vhost (what Spark's options and pika's URLParameters take)."""
        user, password = self.credentials
        host, port = self.process.host, self.amqp_port
        return f"amqp://{user}:{password}@{host}:{port}/{quote(self.vhost)}"

    def log_tail(self, max_bytes: int = 16 * 1024) -> str:
        """The shared broker's log: earlier tests' lines too, so a check that it holds no
        traceback is, if anything, stricter than on a broker of the test's own."""
        return self.process.log_tail(max_bytes)


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

    def put_policy(  # the same call, the test's vhost by default
        self, name: str, pattern: str, definition: dict[str, Any], **kwargs: Any
    ) -> Response:
        kwargs.setdefault("vhost", self.vhost)
        return super().put_policy(name, pattern, definition, **kwargs)

    def delete_policy(
        self, name: str, *, vhost: str | None = None, operator: bool = False
    ) -> Response:
        return super().delete_policy(name, vhost=vhost or self.vhost, operator=operator)


def management_for(broker: HutchBroker | VhostBroker) -> Management:
    """The management API of a test's broker as guest: on a shared broker a ``VhostManagement``
    (the test's vhost by default, "/" refused), on a broker of the test's own a ``Management``."""
    if isinstance(broker, VhostBroker):
        return VhostManagement(broker)
    return Management(broker)


def wants_shared(request: pytest.FixtureRequest) -> bool:
    """True for a test of a ``shared_broker`` module that is not itself marked ``own_broker``."""
    node = request.node
    return node.get_closest_marker(SHARED) is not None and node.get_closest_marker(OWN) is None


def start_module_broker(tmp_path_factory: pytest.TempPathFactory) -> HutchBroker:
    """A hutch-broker for one module's tests, its data under the session's temporary directory:
    the side-by-side tests share it by name prefix, a ``shared_broker`` module by vhost."""
    work_dir = tmp_path_factory.mktemp("hutch")
    return HutchBroker(work_dir=work_dir, data_dir=work_dir / "data").start()


def start_shared(tmp_path_factory: pytest.TempPathFactory) -> HutchBroker:
    """A module's broker, with guest's permissions on "/" removed (see the module docstring)."""
    broker = start_module_broker(tmp_path_factory)
    revoked = Management(broker).delete("/permissions/%2F/guest")
    if revoked.status != 204:
        broker.stop(graceful=False)
        raise AssertionError(f"could not take guest's permissions on / away: {revoked}")
    return broker


@contextmanager
def fresh_vhost(process: HutchBroker, test_name: str) -> Iterator[VhostBroker]:
    """A vhost named after the test (guest gets full permissions as its creator), deleted after."""
    admin = Management(process)
    name = f"t-{test_name.removeprefix('test_')[:40]}-{secrets.token_hex(3)}"
    created = admin.put(f"/vhosts/{quote(name)}", {})
    if created.status != 201:
        raise AssertionError(f"vhost {name!r} not created: {created}")
    yield VhostBroker(process, name)
    deleted = admin.delete(f"/vhosts/{quote(name)}")
    if deleted.status != 204:
        raise AssertionError(f"vhost {name!r} not deleted: {deleted}")
