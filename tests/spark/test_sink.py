"""The sink against a real broker: confirmed publishes, deterministic ids, failures surface.

"Arrives with confirms" is checked by reading the queue depth right after `save()` returns,
without polling: the sink returns only once the broker confirmed every message.
"""

import re
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.spark.querywaits import wait_count

# hutch-broker: one per module, each test in a vhost of its own (amqp.url names it); RabbitMQ:
# the session's node, unique queue names.
pytestmark = [pytest.mark.spark, pytest.mark.shared_broker]


def sink_writer(frame: Any, amqp: Any, **options: str) -> Any:
    writer = frame.write.format("hutch").mode("append").option("uri", amqp.url)
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def test_batch_write_is_confirmed_and_keeps_ids_and_headers(spark: Any, amqp: Any) -> None:
    queue = amqp.queue("sink")
    rows = [
        (f"body-{i}", f"given-{i}" if i % 2 == 0 else None, {"k": str(i)}, "text/plain")
        for i in range(2000)
    ]
    frame = spark.createDataFrame(
        rows, "body STRING, message_id STRING, headers MAP<STRING,STRING>, content_type STRING"
    ).repartition(2)
    sink_writer(frame, amqp, exchange="", routingKey=queue, idPrefix="t1").save()
    assert amqp.ready(queue) == 2000  # confirmed before save() returned

    messages = amqp.drain(queue)
    by_body = {body.decode(): properties for properties, body in messages}
    assert set(by_body) == {f"body-{i}" for i in range(2000)}
    generated = []
    for i in range(2000):
        properties = by_body[f"body-{i}"]
        assert properties.headers["k"] == str(i)
        assert properties.headers["spark-write-id"] == "t1"
        assert properties.headers["spark-partition"] in ("0", "1")
        assert properties.headers["spark-attempt"] == "0"
        assert properties.content_type == "text/plain"
        assert properties.delivery_mode == 2
        if i % 2 == 0:
            assert properties.message_id == f"given-{i}"
        else:
            generated.append(properties.message_id)
    assert all(re.fullmatch(r"t1:[01]:\d+", message_id) for message_id in generated)
    assert len(set(generated)) == 1000


def test_unroutable_publish_fails_the_write(spark: Any, amqp: Any) -> None:
    exchange = f"unbound-{amqp.queue('x')}"
    amqp.channel.exchange_declare(exchange, exchange_type="direct")
    frame = spark.createDataFrame([(b"lost",)], "body BINARY")
    with pytest.raises(Exception, match="returned unroutable \\(312 NO_ROUTE"):
        sink_writer(frame, amqp, exchange=exchange, routingKey="nowhere").save()


def test_bad_sink_columns_fail_before_any_task(spark: Any) -> None:
    with pytest.raises(Exception, match="needs a 'body' column"):
        spark.range(3).write.format("hutch").mode("append").option("exchange", "").save()


def test_stream_sink_ids_are_query_batch_partition_row(
    spark: Any, amqp: Any, tmp_path: Path
) -> None:
    source, target = amqp.queue("in"), amqp.queue("out")
    amqp.publish(source, 300)
    frame = (
        spark.readStream.format("hutch")
        .option("uri", amqp.url)
        .option("queue", source)
        .option("maxMessagesPerBatch", "100")
        .load()
        .select("body")
    )
    query = (
        frame.writeStream.format("hutch")
        .option("uri", amqp.url)
        .option("exchange", "")
        .option("routingKey", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .queryName(f"republish_{source.replace('-', '_')}")  # Spark passes it as an option
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_count("300 republished", lambda: amqp.ready(target), 300, query, "ready in target")
    finally:
        query.stop()
    messages = amqp.drain(target)
    assert len(messages) == 300
    ids = [properties.message_id for properties, _ in messages]
    assert len(set(ids)) == 300
    for properties, _ in messages:
        query_id, batch_id, partition, row = properties.message_id.split(":")
        assert query_id == str(query.id) == properties.headers["spark-query-id"]
        assert batch_id == properties.headers["spark-batch-id"]
        assert partition == properties.headers["spark-partition"]
        assert int(row) >= 0
    assert isinstance(messages[0][0], pika.BasicProperties)
