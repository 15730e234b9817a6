"""An executor's read of one stream slice (streamreads.read_slice) against a real hutch-broker,
without Spark: the rows, the clean end, and data loss found while reading. And against
RabbitMQ 3.10.8: a slice reads the same there, but its management API has no offsets to plan
with, and the source says so.

The clean end matters because pika rejects the deliveries still in flight when a consumer is
cancelled, and a stream answers basic.reject by closing the connection with 540: a reader that
let the broker send past its slice ends every task with a broken connection (logged by the
reader as "cancelling the reader ..."). The credit rule keeps the broker inside the slice.
"""

import json
import logging
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from hutch_spark import streambounds, streamoptions, streamreads, streamwire
from hutch_spark.errors import HutchConnectionError, HutchDataLossError
from hutch_spark.streamplan import Bounds, Slice
from hutch_testing.relay import CountingRelay

from tests.spark.background import Background

LOGGER = "hutch_spark.streamreads"
# One hutch-broker for the module, each test in a vhost of its own: its amqp_url names it, so the
# reader's URI and the planner's management calls go there.
pytestmark = pytest.mark.shared_broker


def stream(channel: Any, name: str, count: int, **arguments: Any) -> str:
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream", **arguments})
    for n in range(count):
        body = json.dumps({"n": n, "pad": "x" * 200}).encode()
        channel.basic_publish("", name, body, pika.BasicProperties(message_id=f"{name}-{n}"))
    return name


def read(broker: Any, slice_: Slice, **options: str) -> list[tuple[int, str]]:
    settings = streamoptions.parse_stream_options(
        {"streams": slice_.stream, "uri": broker.amqp_url, **options}
    )
    rows = []
    for batch in streamreads.read_slice(settings, slice_):
        offsets, ids = batch.column("offset").to_pylist(), batch.column("message_id").to_pylist()
        rows.extend(zip(offsets, ids, strict=True))
    return rows


@pytest.mark.parametrize("prefetch", ["1000", "7", "1"])
def test_a_slice_reads_its_offsets_and_ends_without_a_broken_connection(
    hutch_broker: Any, channel: Any, caplog: pytest.LogCaptureFixture, prefetch: str
) -> None:
    name = stream(channel, "s", 100)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        rows = read(hutch_broker, Slice(name, 10, 30), prefetch=prefetch)
        tail = read(hutch_broker, Slice(name, 95, 100), prefetch=prefetch)
    assert rows == [(n, f"s-{n}") for n in range(10, 30)]
    assert tail == [(n, f"s-{n}") for n in range(95, 100)]


def test_deliveries_that_arrive_with_consume_ok_are_acked_before_the_next_read(
    hutch_broker: Any, channel: Any
) -> None:
    """A quick broker sends the first deliveries (the whole credit) in the same read as
    consume-ok. The reader must ack them before it blocks for more: otherwise nothing comes
    until the broker's heartbeat, and with heartbeats off the read times out."""
    name = stream(channel, "s", 100)
    uri = f"{hutch_broker.amqp_url}?heartbeat=0"
    for _ in range(3):  # the coalescing is the broker's timing: several reads make it likely
        rows = read(hutch_broker, Slice(name, 10, 30), prefetch="7", uri=uri, readTimeoutMs="3000")
        assert rows == [(n, f"s-{n}") for n in range(10, 30)]


def test_retention_under_the_reader_is_data_loss(
    hutch_broker: Any, channel: Any, caplog: pytest.LogCaptureFixture
) -> None:
    limits = {"x-max-length-bytes": 40_000, "x-stream-max-segment-size-bytes": 8_000}
    name = stream(channel, "kept", 600, **limits)
    gone = Slice(name, 0, 5)
    with pytest.raises(HutchDataLossError, match=r"no longer holds offsets \[0, "):
        read(hutch_broker, gone)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert read(hutch_broker, gone, failOnDataLoss="false") == []
    assert "failOnDataLoss=false, so they are skipped" in caplog.text
    # A slice across the first offset held reads what is left of it.
    rows = read(hutch_broker, Slice(name, 0, 600), failOnDataLoss="false")
    offsets = [offset for offset, _ in rows]
    assert offsets == list(range(offsets[0], 600))
    assert offsets[0] > 5


@pytest.fixture
def no_kept_connections() -> Iterator[None]:
    """The test starts and ends with no reader connection kept in this process."""
    streamwire.close_idle()
    yield
    streamwire.close_idle()


def readers(api: Any, vhost: str) -> list[dict[str, Any]]:
    """The stream readers' connections open in `vhost`, as the management API lists them."""
    listed = api.get(f"/vhosts/{urllib.parse.quote(vhost, safe='')}/connections").body
    return [
        item
        for item in listed
        if str(item["client_properties"].get("connection_name", "")).startswith(
            "hutch-spark stream reader"
        )
    ]


def test_the_next_slice_reuses_the_connection_the_last_one_kept(
    hutch_broker: Any, channel: Any, api: Any, vhost: str, no_kept_connections: None
) -> None:
    name = stream(channel, "s", 100)
    assert read(hutch_broker, Slice(name, 0, 40)) == [(n, f"s-{n}") for n in range(40)]
    # Read to its end, the slice closed its channel (so its consumer) and kept the connection.
    [kept] = readers(api, vhost)
    assert kept["channels"] == 0
    assert api.queue(name)["consumers"] == 0
    assert streamwire.idle_count() == 1
    assert read(hutch_broker, Slice(name, 40, 100)) == [(n, f"s-{n}") for n in range(40, 100)]
    [again] = readers(api, vhost)
    assert again["peer_port"] == kept["peer_port"]  # the same TCP connection
    assert streamwire.idle_count() == 1


def test_a_kept_connection_idle_too_long_is_closed_and_replaced(
    hutch_broker: Any,
    channel: Any,
    api: Any,
    vhost: str,
    no_kept_connections: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = stream(channel, "s", 20)
    read(hutch_broker, Slice(name, 0, 10))
    [kept] = readers(api, vhost)
    monkeypatch.setattr(streamwire, "MAX_IDLE_S", 0.0)  # every kept one is past its time
    assert read(hutch_broker, Slice(name, 10, 20)) == [(n, f"s-{n}") for n in range(10, 20)]
    [fresh] = readers(api, vhost)
    assert fresh["peer_port"] != kept["peer_port"]


def test_a_read_that_fails_keeps_no_connection(
    hutch_broker: Any, channel: Any, api: Any, vhost: str, no_kept_connections: None
) -> None:
    name = stream(channel, "s", 10)
    with pytest.raises(HutchConnectionError, match="arrived for 1 s"):
        read(hutch_broker, Slice(name, 5, 15), readTimeoutMs="1000")  # 10-14 never come
    assert streamwire.idle_count() == 0
    assert readers(api, vhost) == []


# How long a read whose messages never come may wait before the test calls it a hang: not a
# measure (readTimeoutMs ends it in 3 s) but the guard that turns a read the broker's heartbeats
# keep alive for ever into a failure that says so.
HANG_GUARD_S = 60.0


@pytest.mark.own_broker  # a broker-wide setting: a 2 s heartbeat
@pytest.mark.timeout(120)  # past the guard, so a hang fails with its own message
def test_heartbeats_do_not_extend_the_read_timeout(
    hutch_broker_factory: Any, tmp_path: Any
) -> None:
    """readTimeoutMs is the time a read may go without a message of its slice. The slice ends
    past the stream's last offset, so the reader waits at the tail on a healthy connection: the
    broker (heartbeat 2 s) sends a heartbeat every second, six of them within the 6 s timeout
    (6 s and not less: the first five messages must arrive inside it, on a busy machine too).
    Those frames must not restart it, or a slice whose messages never come waits for ever."""
    config = tmp_path / "hutch.conf"
    config.write_text("heartbeat = 2\n")
    broker = hutch_broker_factory(extra_args=["--config", str(config)])
    publisher = pika.BlockingConnection(pika.URLParameters(broker.amqp_url))
    try:
        channel = publisher.channel()
        channel.confirm_delivery()
        name = stream(channel, "tail", 10)
    finally:
        publisher.close()
    # offsets 10-14 never come
    reader = Background(lambda: read(broker, Slice(name, 5, 15), readTimeoutMs="6000"))
    ended = reader.error(
        HANG_GUARD_S,
        "the read of a slice whose messages never come",
        "the broker's heartbeats keep extending readTimeoutMs",
    )
    with pytest.raises(
        HutchConnectionError,
        match=r"no message of stream 'tail' arrived for 6 s while reading \[5, 15\), "
        r"expecting offset 10 \(readTimeoutMs\)",
    ):
        raise ended


@pytest.mark.own_broker  # it restarts the broker
def test_a_kept_connection_a_broker_restart_broke_is_replaced_before_the_read(
    hutch_broker: Any, no_kept_connections: None, caplog: pytest.LogCaptureFixture
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(hutch_broker.amqp_url))
    publisher = connection.channel()
    publisher.confirm_delivery()  # confirmed: on disk, so the restart keeps them
    name = stream(publisher, "s", 100)
    connection.close()
    assert read(hutch_broker, Slice(name, 0, 50)) == [(n, f"s-{n}") for n in range(50)]
    assert streamwire.idle_count() == 1
    hutch_broker.restart()
    with caplog.at_level(logging.INFO, logger="hutch_spark.streamwire"):
        rows = read(hutch_broker, Slice(name, 50, 100))
    assert rows == [(n, f"s-{n}") for n in range(50, 100)]
    assert "a kept stream connection no longer answers" in caplog.text
    assert streamwire.idle_count() == 1  # the new one, kept in turn


def test_rabbitmq_reads_a_slice_the_same_and_planning_says_it_needs_hutch(
    rabbitmq: Any,
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq.amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    try:
        name = stream(channel, f"s-{uuid.uuid4().hex[:8]}", 100)
    finally:
        connection.close()
    assert read(rabbitmq, Slice(name, 40, 60)) == [(n, f"{name}-{n}") for n in range(40, 60)]
    settings = streamoptions.parse_stream_options(
        {"streams": name, "uri": rabbitmq.amqp_url, "managementUri": rabbitmq.http_url}
    )
    with pytest.raises(HutchConnectionError, match="needs hutch-broker"):
        streambounds.fetch(settings)


def test_a_super_streams_partitions_are_its_bound_streams_in_partition_order(
    hutch_broker: Any, channel: Any
) -> None:
    channel.exchange_declare("invoices", "direct", durable=True, arguments={"x-super-stream": True})
    for n in (2, 0, 1):  # bound out of order: the partition order argument decides
        name = stream(channel, f"invoices-{n}", n + 1)
        args = {"x-stream-partition-order": n}
        channel.queue_bind(name, "invoices", routing_key=str(n), arguments=args)
        channel.queue_bind(name, "invoices", routing_key=f"again-{n}", arguments=args)
    channel.queue_declare("audit", durable=True)
    channel.exchange_declare("audit-x", "fanout", durable=True)
    channel.exchange_bind("audit-x", "invoices", routing_key="0")  # not a queue: not a partition

    def options(name: str) -> Any:
        return streamoptions.parse_stream_options(
            {
                "superStream": name,
                "uri": hutch_broker.amqp_url,
                "managementUri": hutch_broker.http_url,
            }
        )

    found = streambounds.partitions(options("invoices"))
    assert found == ("invoices-0", "invoices-1", "invoices-2")
    resolved = streamoptions.with_streams(options("invoices"), found)
    assert streambounds.fetch(resolved) == {
        "invoices-0": Bounds(0, 1),
        "invoices-1": Bounds(0, 2),
        "invoices-2": Bounds(0, 3),
    }
    channel.exchange_declare("empty", "direct", durable=True)
    with pytest.raises(HutchConnectionError, match="super stream 'empty' has no partitions"):
        streambounds.partitions(options("empty"))
    with pytest.raises(
        HutchConnectionError, match="super stream \\(exchange\\) 'nope' does not exist"
    ):
        streambounds.partitions(options("nope"))


def test_the_bounds_of_several_streams_take_one_management_request(
    hutch_broker: Any, channel: Any
) -> None:
    for n in range(3):
        stream(channel, f"part-{n}", n + 2)
    channel.queue_declare("classic", durable=True)
    host, port = urllib.parse.urlsplit(hutch_broker.http_url).netloc.rsplit(":", 1)

    def bounds(names: str, management: str) -> Any:
        settings = streamoptions.parse_stream_options(
            {"streams": names, "uri": hutch_broker.amqp_url, "managementUri": management}
        )
        return streambounds.fetch(settings)

    with CountingRelay(host, int(port)) as relay:
        relayed = f"http://{host}:{relay.port}"
        assert bounds("part-2,part-0,part-1", relayed) == {
            "part-2": Bounds(0, 4),
            "part-0": Bounds(0, 2),
            "part-1": Bounds(0, 3),
        }
        assert (relay.requests, relay.accepted) == (1, 1)  # one listing, not one per stream
    with pytest.raises(HutchConnectionError, match="stream 'nope' does not exist in vhost"):
        bounds("part-0,nope", hutch_broker.http_url)
    with pytest.raises(
        HutchConnectionError, match=r"'classic' in vhost .* is a classic queue, not a stream"
    ):
        bounds("part-0,classic", hutch_broker.http_url)
