"""pytest fixtures for brokers on loopback: the reference RabbitMQ node and fresh hutch-brokers.

Why: side-by-side tests compare hutch-broker with RabbitMQ 3.10.8, so both must be one fixture away.
The reference node boots in ~5-7 s, so there is one per session; tests share it and use unique
names. hutch-broker starts in well under a second, so each test gets a fresh one with its own data
directory under tmp_path (kept by pytest for the last runs, with the broker's console.log).

A missing or broken reference node skips its tests on a developer machine but ERRORs them in CI
(env `CI` set) or with `HUTCH_REFERENCE_REQUIRED=1`, so CI can never go green without it.

Register with `pytest_plugins = ["hutch_testing.pytest_plugin"]` in tests/conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, Unpack

import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from hutch_testing import brokers, clients, processes
from hutch_testing import rabbitmq as reference


class HutchBrokerFactory(Protocol):
    """``hutch_broker_factory``: starts a HutchBroker with these keyword arguments."""

    def __call__(self, **kwargs: Unpack[brokers.HutchLaunchOptions]) -> brokers.HutchBroker: ...


_FALSE_VALUES = ("", "0", "false", "no")


def reference_required() -> bool:
    """True in CI and when HUTCH_REFERENCE_REQUIRED=1: the reference node may not be skipped."""
    in_ci = os.environ.get("CI", "").strip().lower() not in _FALSE_VALUES
    return in_ci or os.environ.get("HUTCH_REFERENCE_REQUIRED") == "1"


def _unavailable(reason: str) -> None:
    if reference_required():
        pytest.fail(
            f"the reference RabbitMQ {reference.EXPECTED_VERSION} is required here "
            f"(CI or HUTCH_REFERENCE_REQUIRED=1) but is unavailable: {reason}",
            pytrace=False,
        )
    pytest.skip(f"reference RabbitMQ unavailable: {reason.splitlines()[0]}")


def _start_reference(node: reference.RabbitMQ) -> str | None:
    """Start the node; return why it is unusable, or None."""
    try:
        node.start()
    except processes.BrokerStartError as error:
        return str(error)
    version = node.version()
    if version != reference.EXPECTED_VERSION:
        return f"it reports version {version}, not {reference.EXPECTED_VERSION}"
    return None


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[reference.RabbitMQ]:
    """The session's RabbitMQ 3.10.8 node on loopback (guest/guest, management plugin enabled)."""
    node = reference.RabbitMQ()
    problem = _start_reference(node)
    if problem is not None:
        node.stop(keep_files=True)  # its logs, for a look after the run
        _unavailable(problem)
    yield node
    node.stop()


@pytest.fixture
def hutch_broker_factory(tmp_path: Path) -> Iterator[HutchBrokerFactory]:
    """Start hutch-brokers (keyword arguments go to `HutchBroker`); all stop after the test."""
    started: list[brokers.HutchBroker] = []

    def start(**kwargs: Unpack[brokers.HutchLaunchOptions]) -> brokers.HutchBroker:
        index = len(started)
        kwargs.setdefault("data_dir", tmp_path / f"hutch-{index}" / "data")
        broker = brokers.HutchBroker(work_dir=tmp_path / f"hutch-{index}", **kwargs)
        started.append(broker)
        return broker.start()

    yield start
    for broker in reversed(started):
        broker.stop()


@pytest.fixture
def hutch_broker(hutch_broker_factory: HutchBrokerFactory) -> brokers.HutchBroker:
    """A fresh hutch-broker on loopback with an empty data directory under tmp_path."""
    return hutch_broker_factory()


@pytest.fixture
def connection(hutch_broker: brokers.HutchBroker) -> Iterator[BlockingConnection]:
    """A pika connection to the test's hutch-broker, closed afterwards if still open."""
    conn = clients.connect(hutch_broker)
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection: BlockingConnection) -> BlockingChannel:
    return connection.channel()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the reference node `rabbitmq`, so `-m "not rabbitmq"` works."""
    for item in items:
        if "rabbitmq" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.rabbitmq)
