"""Issue 16: what the source, the batch reader and the sink say when the broker cannot be used,
on real sockets against hutch-broker and RabbitMQ 3.10.8 (no SparkSession: the components that
connect, as Spark's driver and executors call them; test_tls.py shows the text through Spark).

A CA that did not issue the broker's certificate, TLS to a plain port and a refused connection
must name the broker's host:port and the cause (pika's own error says neither); a 403 on
basic.consume must tell missing read permission from a queue in exclusive use, and 405 names
another connection's exclusive queue. The reply texts these rely on were observed on both
brokers (failures.py) and are asserted here, so a broker that changes them fails this file.
"""

from __future__ import annotations

import secrets
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from hutch_demo import certs, management, ports
from hutch_spark import batchreads, connections, options
from hutch_spark.consumer import QueueConsumer
from hutch_spark.errors import HutchConnectionError
from hutch_spark.publishing import ConfirmedPublisher, Outbound
from hutch_testing.relay import CountingRelay
from hutch_testing.tlsbrokers import TLSHutchBroker, TLSRabbitMQ

pytestmark = pytest.mark.spark


def consumer(uri: str, queue: str, *, ca_file: str | None = None, exclusive: bool = False) -> Any:
    params = connections.parameters(uri, connection_name="connect-errors test", ca_file=ca_file)
    live = QueueConsumer(
        parameters=params,
        queue=queue,
        prefetch=10,
        exclusive=exclusive,
        give_up_after_s=1.0,
        max_backoff_s=0.2,
    )
    live.start()
    return live


def consumer_error(uri: str, queue: str, **kwargs: Any) -> str:
    """The HutchConnectionError the source's consumer ends with (within 20 s)."""
    live = consumer(uri, queue, **kwargs)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                live.take(max_messages=1, max_bytes=1, timeout_s=0.2)
            except HutchConnectionError as error:
                return str(error)
        pytest.fail(f"the consumer of {queue!r} did not fail in 20 s")
    finally:
        live.stop()


def sink_error(uri: str, ca_file: str | None = None) -> str:
    params = connections.parameters(uri, connection_name="connect-errors sink", ca_file=ca_file)
    publisher = ConfirmedPublisher(params, window=10, mandatory=False)
    message = Outbound("", "nowhere", b"x", pika.BasicProperties())
    with pytest.raises(HutchConnectionError) as raised:
        publisher.publish_all([message])
    return str(raised.value)


def batch_read_error(uri: str, queue: str, ca_file: str | None = None) -> str:
    raw = {"uri": uri, "queue": queue, **({"caFile": ca_file} if ca_file else {})}
    with pytest.raises(HutchConnectionError) as raised:
        list(batchreads.read_queue(options.parse_source_options(raw), queue))
    return str(raised.value)


# --- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["hutch", "rabbitmq"])
def tls_broker(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[Any]:
    """A broker serving AMQPS with a certificate of a CA made here (plain AMQP kept)."""
    leaf = certs.Authority().issue("broker", hosts=("localhost", "127.0.0.1"))
    work = tmp_path_factory.mktemp(f"connect-errors-{request.param}")
    launcher = TLSHutchBroker if request.param == "hutch" else TLSRabbitMQ
    broker = launcher(leaf=leaf, work_dir=work / "broker").start()
    try:
        yield broker
    finally:
        broker.stop()


def test_a_wrong_ca_file_is_named_with_the_broker_and_openssl_reason(
    tls_broker: Any, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger-ca.crt"
    stranger.write_bytes(certs.Authority("Not the issuer").pem)
    user, password = tls_broker.credentials
    uri = f"amqps://{user}:{password}@localhost:{tls_broker.amqps_port}/%2F"
    said = (
        f"the TLS certificate of the broker at localhost:{tls_broker.amqps_port} was not "
        f"verified by the CA file '{stranger}' (certificate verify failed: "
    )
    with CountingRelay("localhost", tls_broker.amqps_port) as relay:
        # Final at the first connect: the consumer does not retry it (it would, within its
        # 1 s budget), as a relay that counts the connects shows.
        relayed = f"amqps://{user}:{password}@localhost:{relay.port}/%2F"
        source = consumer_error(relayed, "orders", ca_file=str(stranger))
        assert relay.accepted == 1, f"{relay.accepted} connects: the consumer retried"
    assert source.startswith("hutch: cannot consume from queue 'orders': "), source
    assert said.replace(str(tls_broker.amqps_port), str(relay.port)) in source, source
    assert said in batch_read_error(uri, "orders", str(stranger))
    assert sink_error(uri, str(stranger)).startswith(f"hutch sink: {said}")


def test_tls_to_the_plain_amqp_port_says_it_does_not_speak_tls(broker: Any) -> None:
    user, password = broker.credentials
    uri = f"amqps://{user}:{password}@localhost:{broker.amqp_port}/%2F"
    said = (
        f"the TLS handshake with the broker at localhost:{broker.amqp_port} failed: wrong version "
        f"number (WRONG_VERSION_NUMBER); the peer does not speak TLS: is {broker.amqp_port} a "
        "plain amqp:// port?"
    )
    assert said in consumer_error(uri, "orders")
    assert said in batch_read_error(uri, "orders")
    assert sink_error(uri) == f"hutch sink: {said}"


def test_a_refused_connection_names_the_address() -> None:
    port = ports.free_port()
    uri = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    said = f"the broker at 127.0.0.1:{port} refused the connection (nothing listens there"
    assert said in consumer_error(uri, "orders")
    assert said in batch_read_error(uri, "orders")
    assert said in sink_error(uri)


# --- refusals of basic.consume --------------------------------------------------------------


@pytest.fixture
def reader_without_read(broker: Any) -> Iterator[str]:
    """The URI of a new user with configure and write on everything but no read."""
    api = management.Management(broker)
    name = f"no-read-{secrets.token_hex(3)}"
    password = secrets.token_urlsafe(12)
    assert api.put(f"/users/{name}", {"password": password, "tags": ""}).ok
    assert api.put(f"/permissions/%2F/{name}", {"configure": ".*", "write": ".*", "read": ""}).ok
    yield f"amqp://{name}:{urllib.parse.quote(password)}@{broker.host}:{broker.amqp_port}/%2F"
    api.delete(f"/users/{name}")


@pytest.mark.parametrize("exclusive", [False, True])
def test_no_read_permission_says_so_and_not_exclusive_use(
    amqp: Any, reader_without_read: str, exclusive: bool
) -> None:
    queue = amqp.queue()
    user = urllib.parse.urlsplit(reader_without_read).username
    error = consumer_error(reader_without_read, queue, exclusive=exclusive)
    assert error == (
        f"hutch: user '{user}' lacks read permission on queue '{queue}' in vhost '/' (403 "
        f"ACCESS_REFUSED: ACCESS_REFUSED - access to queue '{queue}' in vhost '/' refused for "
        f"user '{user}'); grant it with a Permission object whose spec.read matches the queue "
        "(docs/operator.md, Tenancy)"
    )


def test_an_exclusive_consumer_elsewhere_is_named(amqp: Any) -> None:
    queue = amqp.queue()
    amqp.channel.basic_consume(queue, lambda *_: None, exclusive=True)
    assert consumer_error(amqp.url, queue) == (
        f"hutch: queue '{queue}' is in exclusive use: another consumer holds it with "
        f"exclusive=true (403 ACCESS_REFUSED: ACCESS_REFUSED - queue '{queue}' in vhost '/' in "
        "exclusive use)"
    )


def test_an_exclusive_queue_of_another_connection_is_final(amqp: Any) -> None:
    queue = f"spark-locked-{secrets.token_hex(4)}"
    amqp.channel.queue_declare(queue, exclusive=True)
    error = consumer_error(amqp.url, queue)
    assert error.startswith(
        f"hutch: queue '{queue}' is an exclusive queue of another connection, which no other "
        "connection may consume (405 RESOURCE_LOCKED: RESOURCE_LOCKED - cannot obtain exclusive "
        f"access to locked queue '{queue}' in vhost '/'."
    ), error
