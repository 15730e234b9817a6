"""examples/spark-user.yaml's Permission is what the Spark job needs, on both brokers.

Why: the chart and the docs run windowed_counts as a User of its own instead of the Broker's
administrator, with a Permission that grants what the source and sink do on the wire and no
more. That claim rests on RabbitMQ's rules (basic.consume needs read on the queue, a publish
write on the exchange, a passive queue.declare nothing) and on hutch-broker applying the same.
Here the example's own regexes are given, through the management API, to a user on
hutch-broker and on RabbitMQ 3.10.8; the job's stream drains the queue with them, and without
the read it fails with the broker's reason (a Permission mistake in the example must fail the
job loudly, not hang it). The sink part checks that write on its exchange, without configure,
is enough to publish.
"""

from __future__ import annotations

import contextlib
import secrets
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hutch_demo import management
from hutch_testing.progress import Watch, wait_until

from tests.spark.querywaits import STALL_S, drain

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark-user.yaml"
# A queue's figures in the management API, "messages" (ready and unacked) first.
FIGURES = ("messages", "messages_ready", "messages_unacknowledged")


def example_permission() -> dict[str, Any]:
    """The Permission object of examples/spark-user.yaml."""
    documents = [doc for doc in yaml.safe_load_all(EXAMPLE.read_text()) if doc]
    (permission,) = [doc for doc in documents if doc["kind"] == "Permission"]
    (user,) = [doc for doc in documents if doc["kind"] == "User"]
    assert permission["spec"]["user"] == user["metadata"]["name"]
    return dict(permission["spec"])


class JobUser:
    """A broker user with given permissions on "/", as the operator would make it."""

    def __init__(self, broker: Any, name: str) -> None:
        self.api = management.Management(broker)
        self.name = name
        self.password = secrets.token_urlsafe(16)
        self.broker = broker
        reply = self.api.put(f"/users/{name}", {"password": self.password, "tags": ""})
        assert reply.ok, reply

    def grant(self, *, configure: str, write: str, read: str) -> None:
        body = {"configure": configure, "write": write, "read": read}
        reply = self.api.put(f"/permissions/%2F/{self.name}", body)
        assert reply.ok, reply

    @property
    def uri(self) -> str:
        password = urllib.parse.quote(self.password, safe="")
        return f"amqp://{self.name}:{password}@{self.broker.host}:{self.broker.amqp_port}/%2F"

    def remove(self) -> None:
        self.api.delete(f"/users/{self.name}")


@pytest.fixture
def job_user(broker: Any) -> Any:
    user = JobUser(broker, f"{example_permission()['user']}-{secrets.token_hex(3)}")
    yield user
    user.remove()


@pytest.fixture
def events(amqp: Any) -> Any:
    """The example's queue, orders-eu, with 30 messages (deleted after: RabbitMQ is shared)."""
    read = example_permission()["read"]
    queue = read.removeprefix("^").removesuffix("$")
    assert f"^{queue}$" == read, "the example grants read on one queue, by its exact name"
    amqp.channel.queue_delete(queue)
    amqp.channel.queue_declare(queue, durable=True)
    amqp.publish(queue, 30)
    yield queue
    amqp.channel.queue_delete(queue)


def start_drain(spark: Any, uri: str, queue: str, checkpoint: Path) -> Any:
    """windowed_counts' source options (availableNow) as the given user; the started query."""
    stream = (
        spark.readStream.format("hutch").option("uri", uri).option("queue", queue)
        .option("maxMessagesPerBatch", "10").load()
    )  # fmt: skip
    return (
        stream.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )  # fmt: skip


def test_the_example_permission_is_enough_to_drain_the_queue(
    spark: Any, amqp: Any, job_user: JobUser, events: str, tmp_path: Path
) -> None:
    spec = example_permission()
    assert (spec["configure"], spec["write"]) == ("", "")  # the source declares nothing
    job_user.grant(configure=spec["configure"], write=spec["write"], read=spec["read"])
    query = start_drain(spark, job_user.uri, events, tmp_path / "checkpoint")
    drain("the drain's end", query, tmp_path / "checkpoint")

    # Acked, not only delivered: the management API counts the queue empty, unacked included.
    # RabbitMQ's figures come in its collector's rounds (every 5 s, later under load), so the
    # wait fails when they have not changed for STALL_S (a message never acked keeps them
    # still), not after a total.
    def figures() -> tuple[Any, ...]:
        queue = amqp.management(f"/api/queues/%2F/{events}")
        stats = queue.get("message_stats") or {}
        return (*(queue.get(key) for key in FIGURES), stats.get("ack"))

    watch = Watch(
        "the queue empty with nothing unacked", f"{', '.join(FIGURES)}, acks", figures, STALL_S
    )
    wait_until(lambda: figures()[0] == 0, watch)
    assert amqp.ready(events) == 0


def test_without_the_read_the_job_fails_with_the_brokers_reason(
    spark: Any, amqp: Any, job_user: JobUser, events: str, tmp_path: Path
) -> None:
    spec = example_permission()
    job_user.grant(configure=spec["configure"], write=spec["write"], read="")
    query = start_drain(spark, job_user.uri, events, tmp_path / "checkpoint")
    # A total bound: the query must fail at its start, so there is no progress to watch.
    with contextlib.suppress(Exception):  # the failure is read from query.exception()
        query.awaitTermination(120)
    assert not query.isActive, "the query neither finished nor failed in 120 s"
    error = str(query.exception())
    assert "403 ACCESS_REFUSED" in error, error
    assert f"access to queue '{events}' in vhost '/' refused for user '{job_user.name}'" in error
    # ...and says what to do about it, without blaming an exclusive consumer.
    assert f"user '{job_user.name}' lacks read permission on queue '{events}'" in error, error
    assert "grant it with a Permission object" in error
    assert "exclusive" not in error
    assert amqp.ready(events) == 30  # nothing was taken


def test_the_sink_publishes_with_write_on_its_exchange_and_no_configure(
    spark: Any, amqp: Any, job_user: JobUser, events: str
) -> None:
    # windowed_counts --sink exchange: the results go to an exchange the job did not declare.
    amqp.channel.exchange_declare("spark-results", "direct", durable=True)
    amqp.channel.queue_bind(events, "spark-results", routing_key="counts")
    job_user.grant(configure="", write="^spark-results$", read="")
    frame = spark.createDataFrame([(f"r-{i}",) for i in range(5)], "body STRING")
    try:
        (
            frame.write.format("hutch").mode("append").option("uri", job_user.uri)
            .option("exchange", "spark-results").option("routingKey", "counts").save()
        )  # fmt: skip
        assert amqp.ready(events) == 35
        job_user.grant(configure="", write="", read="")
        with pytest.raises(Exception, match="ACCESS_REFUSED"):  # Spark wraps the sink's error
            (
                frame.write.format("hutch").mode("append").option("uri", job_user.uri)
                .option("exchange", "spark-results").option("routingKey", "counts").save()
            )  # fmt: skip
        assert amqp.ready(events) == 35
    finally:
        amqp.channel.exchange_delete("spark-results")
