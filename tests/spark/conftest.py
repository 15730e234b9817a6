"""Fixtures for the hutch_spark tests: one local SparkSession, a broker, and AMQP helpers.

Why so: starting a SparkSession costs ~10 s and ~1.5 GB on our 2-core machines, so the whole
run shares one (`local[2]`, no UI). Spark's Python workers are started by the JVM and run
whatever `PYSPARK_PYTHON` names, so it is pinned to this interpreter (else the planning worker
runs `python3` from PATH and dies on a missing pyarrow); `SPARK_LOCAL_IP` avoids a hostname that
does not resolve to loopback. Tests marked `spark` fail loudly in CI (env `CI`) when Java or
pyspark is missing, and skip with the reason elsewhere.

Broker tests run against hutch-broker (a fresh process per test, or in a module marked
``shared_broker`` a vhost of its own on the module's broker, see ``hutch_testing.broker_plugin``)
and the reference RabbitMQ 3.10.8 (one per session, so every test uses its own uniquely named
queues).
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import shutil
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.exceptions
import pytest
from hutch_demo.management import quote
from hutch_testing import levels, vhosts

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

SPARK_TEST_TIMEOUT = 300  # seconds; the first test also pays for the SparkSession's start
_FALSE = ("", "0", "false", "no")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spark: needs pyspark, pyarrow and Java (a local SparkSession or its types)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("spark") is not None:
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT))


def spark_problem() -> str | None:
    """Why Spark tests cannot run here, or None."""
    for module, hint in (
        ("pyspark", "pip install -e '.[spark]' (pyspark==4.3.0)"),
        ("pyarrow", "pip install 'pyarrow>=18'"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: {hint}"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(java_home)):
        return "java is not installed (Spark 4.3 needs a JDK 17 or 21)"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("spark") is None:
        return
    problem = spark_problem()
    if problem is None:
        return
    if os.environ.get("CI", "").strip().lower() not in _FALSE:
        pytest.fail(f"Spark tests must run in CI but cannot: {problem}", pytrace=False)
    pytest.skip(f"Spark unavailable: {problem}")


@pytest.fixture(scope="session")
@levels.broker_level
def spark() -> Iterator[Any]:
    """The session's SparkSession with the `hutch` data source registered."""
    import hutch_spark
    from hutch_spark import sessionconf
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("hutch-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config(sessionconf.PYTHON_SOCKETS, "true")  # as docs/spark.md advises
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    hutch_spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def channel(hutch_broker: Any) -> Iterator[Any]:
    """A channel in confirm mode on the module's hutch-broker (its test's vhost), for tests that
    declare and fill stream queues without Spark."""
    connection = pika.BlockingConnection(pika.URLParameters(hutch_broker.amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    yield channel
    connection.close()


@pytest.fixture(params=["hutch", "rabbitmq"])
def broker(request: pytest.FixtureRequest) -> Any:
    """hutch-broker or the reference RabbitMQ; both expose amqp_url and http_url."""
    return request.getfixturevalue("hutch_broker" if request.param == "hutch" else "rabbitmq")


def idle_parameters(url: str) -> pika.URLParameters:
    """Parameters for a test's own connection with heartbeats off. Why: a blocking connection
    answers heartbeats only while it is used, and a test's connection idles through a child
    driver's run (minutes on a loaded machine): the broker dropped it after two missed
    heartbeats, and the next check failed with StreamLostError, not with what it checks."""
    parameters = pika.URLParameters(url)
    parameters.heartbeat = 0
    return parameters


class Amqp:
    """Small blocking helpers for arranging and checking queues (pika, one connection)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.url = broker.amqp_url
        self.http_url = broker.http_url
        self.credentials = broker.credentials
        self.connection = pika.BlockingConnection(idle_parameters(self.url))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def queue(self, prefix: str = "spark") -> str:
        """A fresh durable queue with a unique name."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.channel.queue_declare(name, durable=True)
        return name

    def publish(
        self, queue: str, count: int, *, start: int = 0, with_ids: bool = True
    ) -> list[str]:
        """Publishes JSON bodies {"n": i}; returns the message ids it set."""
        ids = []
        for n in range(start, start + count):
            message_id = f"m-{n}" if with_ids else None
            properties = pika.BasicProperties(
                message_id=message_id,
                headers={"n": n, "flag": True, "raw": b"\xff\x00"},
                content_type="application/json",
                delivery_mode=2,
            )
            self.channel.basic_publish("", queue, json.dumps({"n": n}).encode(), properties)
            if message_id:
                ids.append(message_id)
        return ids

    def ready(self, queue: str) -> int:
        """Ready (not unacked) messages, from a passive queue.declare."""
        return int(self.channel.queue_declare(queue, passive=True).method.message_count)

    def consumers(self, queue: str) -> int:
        """Consumers attached to the queue, from a passive queue.declare."""
        return int(self.channel.queue_declare(queue, passive=True).method.consumer_count)

    def messages(self, queue: str) -> object:
        """Ready and unacked together, as the management API counts them in the queue's vhost
        (RabbitMQ in its collector's rounds, every 5 s; None before its first)."""
        vhost = quote(getattr(self.broker, "vhost", "/"))
        return self.management(f"/api/queues/{vhost}/{quote(queue)}").get("messages")

    def drain(self, queue: str, limit: int = 100_000) -> list[tuple[Any, bytes]]:
        """Gets and acks every ready message: (properties, body) pairs."""
        out: list[tuple[Any, bytes]] = []
        while len(out) < limit:
            method, properties, body = self.channel.basic_get(queue, auto_ack=True)
            if method is None:
                break
            out.append((properties, body))
        return out

    def left_after_stop(self, queue: str, ids: set[str], batch: int) -> list[str]:
        """Drains what a stopped query left in ``queue`` and checks it is at most one batch of
        messages the query had already delivered (``ids``): a stop that comes between a
        batch's commit and the next trigger's planning leaves that batch unacked (docs/spark.md,
        "Delivery guarantee"), and nothing else may be left."""
        left = [str(properties.message_id) for properties, _ in self.drain(queue)]
        assert set(left) <= ids, sorted(set(left) - ids)
        assert len(left) <= batch, len(left)
        return left

    def management(self, path: str) -> Any:
        """GET on the management API (basic auth). On a shared broker a path under the default
        vhost is an error: the test's objects are in its own vhost, so "/" would answer 404s
        and empty lists that pass for the wrong reason."""
        if isinstance(self.broker, vhosts.VhostBroker) and "/%2F" in path:
            raise AssertionError(f"GET {path}: this test runs in vhost {self.broker.vhost!r}")
        request = urllib.request.Request(self.http_url + path)  # noqa: S310 - loopback broker
        user, password = self.credentials
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
            return json.load(reply)

    def close(self) -> None:
        if self.connection.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):  # the broker went away
                self.connection.close()


@pytest.fixture
def amqp(broker: Any) -> Iterator[Amqp]:
    helper = Amqp(broker)
    yield helper
    helper.close()


def wait_for(what: str, probe: Callable[[], Any], timeout: float, query: Any = None) -> Any:
    """Polls `probe` until truthy; fails naming `what` (and the query's error, if any)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        if query is not None and query.exception() is not None:
            pytest.fail(f"{what}: the query failed: {query.exception()}")
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture
def waiter() -> Callable[..., Any]:
    return wait_for
