"""The executor's own AMQP client (streamwire.py, streamframes.py) against real brokers.

The same messages, with every kind of property, empty bodies and bodies larger than a frame, are
published to a stream on hutch-broker and on RabbitMQ 3.10.8; the same slices read from both give
the same rows (all but `received_at`, the reader's clock). Then the connection's failures: a
refused login and a missing vhost are clear errors, and over TLS the `caFile` option is what the
broker's certificate is checked against.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from hutch_demo import certs
from hutch_spark import streamoptions, streamreads
from hutch_spark.errors import HutchConnectionError
from hutch_spark.streamplan import Slice
from hutch_testing.tlsbrokers import TLSHutchBroker, client_context

from tests.spark.background import Background

# One hutch-broker for the module, each test in a vhost of its own (its amqp_url names it).
pytestmark = [pytest.mark.broker, pytest.mark.shared_broker]

BIG = bytes(range(256)) * 1200  # 307,200 bytes: three body frames at a 131,072 frame_max


def message(n: int) -> tuple[bytes, pika.BasicProperties]:
    headers: dict[str, Any] = {"n": n, "tenant": "acme", "flag": n % 2 == 0, "raw": b"\xff\x00"}
    if n % 4 == 1:  # (no nested tables: RabbitMQ's streams drop them, hutch-broker keeps them)
        headers["at"] = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    props = pika.BasicProperties(
        message_id=f"m-{n}" if n % 3 else None,
        correlation_id="corr" if n % 2 else None,
        content_type="application/json",
        timestamp=1_700_000_000 + n,
        delivery_mode=2,
        priority=n % 10,
        app_id="wire-test",
        headers=headers,
    )
    body = b"" if n % 7 == 0 else BIG if n % 11 == 5 else f'{{"n":{n}}}'.encode()
    return body, props


def publish(url: str, name: str, count: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    for n in range(count):
        body, props = message(n)
        channel.basic_publish("", name, body, props)
    connection.close()


def read(url: str, slice_: Slice, **options: str) -> list[dict[str, Any]]:
    settings = streamoptions.parse_stream_options({"streams": slice_.stream, "uri": url, **options})
    found = []
    for batch in streamreads.read_slice(settings, slice_):
        for row in batch.to_pylist():
            row.pop("received_at")
            row["headers"] = dict(row["headers"])
            row["properties"] = dict(row["properties"])
            found.append(row)
    return found


def test_hutch_and_rabbitmq_give_the_same_rows_for_the_same_slices(
    hutch_broker: Any, rabbitmq: Any
) -> None:
    name = f"wire-{uuid.uuid4().hex[:8]}"
    count = 60
    publish(hutch_broker.amqp_url, name, count)
    publish(rabbitmq.amqp_url, name, count)
    for low, high, prefetch in ((0, count, "1000"), (17, 41, "5"), (59, 60, "1")):
        ours = read(hutch_broker.amqp_url, Slice(name, low, high), prefetch=prefetch)
        theirs = read(rabbitmq.amqp_url, Slice(name, low, high), prefetch=prefetch)
        assert [row["offset"] for row in ours] == list(range(low, high))
        assert ours == theirs, (low, high)
    rows = read(hutch_broker.amqp_url, Slice(name, 0, count))
    for row in rows:
        body, props = message(row["offset"])
        assert row["body"] == body
        assert row["message_id"] == props.message_id
        assert row["correlation_id"] == props.correlation_id
        assert row["timestamp"].timestamp() == props.timestamp
        assert row["headers"]["x-stream-offset"] == str(row["offset"])
        assert row["headers"]["raw"] == "/wA="
        assert row["properties"]["priority"] == str(props.priority)


def test_a_refused_login_and_a_missing_vhost_are_clear_errors(hutch_broker: Any) -> None:
    name = "refusals"
    publish(hutch_broker.amqp_url, name, 1)
    port = hutch_broker.amqp_url.rsplit(":", 1)[1].split("/", 1)[0]
    wrong = f"amqp://guest:nope@127.0.0.1:{port}/%2F"
    with pytest.raises(HutchConnectionError, match="refused the login"):
        read(wrong, Slice(name, 0, 1))
    missing = f"amqp://guest:guest@127.0.0.1:{port}/nowhere"
    with pytest.raises(HutchConnectionError, match=r"cannot read stream 'refusals'.*nowhere"):
        read(missing, Slice(name, 0, 1))
    assert [row["offset"] for row in read(hutch_broker.amqp_url, Slice(name, 0, 1))] == [0]


def test_a_stream_that_does_not_exist_is_refused_by_the_broker(hutch_broker: Any) -> None:
    with pytest.raises(HutchConnectionError, match=r"refused to let us read stream 'nope'.*404"):
        read(hutch_broker.amqp_url, Slice("nope", 0, 1))


# How long the reader may take to end once its stream is deleted: not a measure of speed (the
# cancel ends it in milliseconds) but the guard that turns a read that missed the cancel, and
# would wait for ever, into a failure that says so.
MISSED_CANCEL_S = 60.0


@pytest.mark.timeout(120)  # past the guard, so a missed cancel fails with its own message
def test_a_stream_deleted_under_the_reader_ends_the_read_at_once(hutch_broker: Any) -> None:
    """The read ends by the broker's basic.cancel: its message says so ("cancelled the
    consumer"; a read timeout or a broken connection say otherwise), whatever a loaded machine
    does to the clock. The stream is deleted once the reader consumes from it: deleted earlier,
    it would be missing when the reader asks for it, not deleted under it."""
    publish(hutch_broker.amqp_url, "going", 10)
    reader = Background(
        lambda: read(hutch_broker.amqp_url, Slice("going", 0, 20), readTimeoutMs="60000")
    )
    connection = pika.BlockingConnection(pika.URLParameters(hutch_broker.amqp_url))
    try:
        channel = connection.channel()
        while channel.queue_declare("going", passive=True).method.consumer_count == 0:
            # the reader's connect and consume have timeouts of their own: it ends or consumes
            assert reader.is_alive(), f"the read ended before it consumed: {reader.errors}"
            time.sleep(0.05)
        channel.queue_delete("going")
    finally:
        connection.close()
    ended = reader.error(
        MISSED_CANCEL_S,
        "the read of a stream deleted under it",
        "it missed the broker's cancel",
    )
    with pytest.raises(HutchConnectionError, match="cancelled the consumer"):
        raise ended


@pytest.fixture
def tls(tmp_path: Any) -> Iterator[tuple[TLSHutchBroker, certs.Authority, str]]:
    authority = certs.Authority()
    leaf = authority.issue("hutch-broker", hosts=("localhost", "127.0.0.1"))
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(authority.pem)
    broker = TLSHutchBroker(leaf=leaf, plain=False, work_dir=tmp_path / "broker").start()
    try:
        yield broker, authority, str(ca_file)
    finally:
        broker.stop()


def test_a_slice_over_tls_is_checked_against_the_ca_file(tls: Any, tmp_path: Any) -> None:
    broker, authority, ca_file = tls
    params = pika.ConnectionParameters(
        host=broker.host,
        port=broker.amqps_port,
        credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(client_context(authority.pem), "localhost"),
    )
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("secure", durable=True, arguments={"x-queue-type": "stream"})
    for n in range(30):
        body, props = message(n)
        channel.basic_publish("", "secure", body, props)
    connection.close()
    uri = f"amqps://guest:guest@localhost:{broker.amqps_port}/%2F"
    rows = read(uri, Slice("secure", 3, 30), caFile=ca_file)
    assert [row["offset"] for row in rows] == list(range(3, 30))
    assert rows[2]["body"] == BIG  # offset 5: three body frames, over TLS records
    other = tmp_path / "other-ca.crt"
    other.write_bytes(certs.Authority().pem)
    with pytest.raises(HutchConnectionError, match="certificate"):
        read(uri, Slice("secure", 0, 1), caFile=str(other))
