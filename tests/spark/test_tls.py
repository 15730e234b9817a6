"""Issue 16, TLS: the Spark sink, streaming source and batch reader over ``amqps://``.

The broker serves TLS only (no 5672), so every message below crossed a verified TLS connection
that trusted the ``caFile`` option's CA; a CA that did not sign the broker's certificate fails
the read and the stream naming the broker, the CA file and OpenSSL's reason.
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from hutch_demo import certs
from hutch_spark import options
from hutch_spark.errors import HutchOptionError
from hutch_testing.relay import CountingRelay
from hutch_testing.tlsbrokers import TLSHutchBroker, client_context

from tests.spark.querywaits import wait_ended

pytestmark = pytest.mark.spark


class TLSBroker:
    def __init__(self, broker: TLSHutchBroker, authority: certs.Authority, ca_file: Path) -> None:
        self.broker = broker
        self.authority = authority
        self.ca_file = str(ca_file)
        self.uri = f"amqps://guest:guest@localhost:{broker.amqps_port}/%2F"

    def channel(self) -> Any:
        params = pika.ConnectionParameters(
            host=self.broker.host,
            port=self.broker.amqps_port,
            credentials=pika.PlainCredentials("guest", "guest"),
            ssl_options=pika.SSLOptions(client_context(self.authority.pem), "localhost"),
        )
        return pika.BlockingConnection(params).channel()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: Any) -> Iterator[TLSBroker]:
    authority = certs.Authority()
    leaf = authority.issue("hutch-broker", hosts=("localhost", "127.0.0.1"))
    work = tmp_path_factory.mktemp("spark-tls")
    ca_file = work / "ca.crt"
    ca_file.write_bytes(authority.pem)
    broker = TLSHutchBroker(leaf=leaf, plain=False, work_dir=work / "broker").start()
    try:
        yield TLSBroker(broker, authority, ca_file)
    finally:
        broker.stop()


def test_sink_then_stream_over_amqps_with_the_ca_file(spark: Any, tls: TLSBroker, tmp_path):
    channel = tls.channel()
    channel.queue_declare("spark.tls", durable=True)
    frame = spark.createDataFrame([(f"m-{i}",) for i in range(300)], "body STRING")
    (
        frame.repartition(2).write.format("hutch").mode("append")
        .option("uri", tls.uri).option("caFile", tls.ca_file)
        .option("exchange", "").option("routingKey", "spark.tls").save()
    )  # fmt: skip
    assert channel.queue_declare("spark.tls", passive=True).method.message_count == 300

    bodies: list[str] = []

    def collect(batch: Any, _: int) -> None:
        bodies.extend(row.body.decode() for row in batch.select("body").collect())

    stream = (
        spark.readStream.format("hutch").option("uri", tls.uri).option("caFile", tls.ca_file)
        .option("queue", "spark.tls").option("maxMessagesPerBatch", "100").load()
    )  # fmt: skip
    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    wait_ended("the availableNow drain's end", query, lambda: len(bodies), "rows collected")
    query.awaitTermination()  # ended: returns, or raises its failure
    assert query.exception() is None
    assert sorted(bodies) == sorted(f"m-{i}" for i in range(300))


def test_a_ca_that_did_not_sign_the_broker_fails_the_read(spark: Any, tls: TLSBroker, tmp_path):
    tls.channel().queue_declare("spark.tls.refused", durable=True)
    stranger = tmp_path / "stranger.crt"
    stranger.write_bytes(certs.Authority("Not the issuer").pem)
    reader = (
        spark.read.format("hutch").option("uri", tls.uri).option("caFile", str(stranger))
        .option("queue", "spark.tls.refused")
    )  # fmt: skip
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED") as raised:
        reader.load().collect()
    assert unverified(tls, stranger) in str(raised.value)


def test_a_ca_that_did_not_sign_the_broker_fails_the_stream_at_once_saying_so(
    spark: Any, tls: TLSBroker, tmp_path
):
    # A certificate that fails verification fails the same way on every retry, so the
    # streaming consumer must not retry it: the query fails on its first connect, naming the
    # CA file and OpenSSL's reason. The relay counts the connects the source makes; a retry
    # loop (1, 2, 4 ... s apart, up to the 60 s availableNow budget) would show several.
    tls.channel().queue_declare("spark.tls.stream-refused", durable=True)
    stranger = tmp_path / "stranger.crt"
    stranger.write_bytes(certs.Authority("Not the issuer").pem)
    with CountingRelay("localhost", tls.broker.amqps_port) as relay:
        stream = (
            spark.readStream.format("hutch").option("caFile", str(stranger))
            .option("uri", f"amqps://guest:guest@localhost:{relay.port}/%2F")
            .option("queue", "spark.tls.stream-refused").load()
        )  # fmt: skip
        query = (
            stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True).start()
        )  # fmt: skip
        # A total bound: the query must fail at its start, so there is no progress to watch.
        with contextlib.suppress(Exception):  # the failure is read from query.exception()
            query.awaitTermination(150)
        assert not query.isActive, "the query neither finished nor failed in 150 s"
        assert relay.accepted == 1, f"{relay.accepted} connects: the source retried"
    error = str(query.exception())
    assert "hutch: cannot consume from queue 'spark.tls.stream-refused': " in error, error
    assert "within 60 s" not in error, error
    said = (
        f"the TLS certificate of the broker at localhost:{relay.port} was not verified by the "
        f"CA file '{stranger}' (certificate verify failed: "
    )
    assert said in error, error


def unverified(tls: TLSBroker, ca_file: Path) -> str:
    """The start of failures.py's message for a broker certificate `ca_file` did not issue."""
    return (
        f"the TLS certificate of the broker at localhost:{tls.broker.amqps_port} was not "
        f"verified by the CA file '{ca_file}' (certificate verify failed: "
    )


def test_ca_file_needs_an_amqps_uri():
    with pytest.raises(HutchOptionError, match=r"option 'caFile' = '/ca\.crt' needs an amqps://"):
        options.parse_sink_options({"uri": "amqp://h/%2F", "exchange": "", "caFile": "/ca.crt"})
    parsed = options.parse_sink_options({"uri": "amqps://h/%2F", "exchange": "", "cafile": "/c"})
    assert parsed.ca_file == "/c"  # Spark lower-cases option keys
