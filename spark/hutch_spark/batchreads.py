"""`spark.read.format("hutch")`: a one-shot read of a queue on an executor.

Why it differs from the stream: a batch query has no commit log, so there is nothing to tie an ack
to. `batchMode=peek` (default) reads up to `maxMessages` and closes the channel without acking, so
the broker re-queues everything (side effects: `redelivered=true`, delivery count +1).
`batchMode=drain` acks once Spark has consumed the whole iterator: at-most-once, and every action
re-reads the queue, so `cache()` or write at once. An at-least-once drain is the stream with
`trigger(availableNow=True)` (docs/contracts/spark.md#batch-read). With option `queues`, each queue
is one partition that reads up to `maxMessages` of that queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pika
import pika.exceptions
import pyarrow as pa

from hutch_spark import connections, failures, records
from hutch_spark.errors import HutchConnectionError
from hutch_spark.options import SourceOptions


def read_queue(settings: SourceOptions, queue: str) -> Iterator[pa.RecordBatch]:
    """Yields one batch of up to maxMessages, stopping after one empty pollTimeoutMs."""
    params = connections.parameters(
        settings.uri, connection_name=f"hutch-spark batch read {queue}", ca_file=settings.ca_file
    )
    try:
        connection = pika.BlockingConnection(params)
    except (pika.exceptions.AMQPError, OSError) as error:  # TLS and DNS errors come unwrapped
        raise _cannot_connect(error, params, queue) from error
    try:
        channel = connection.channel()
        # Unacked messages count against prefetch, so peek needs room for all of them.
        channel.basic_qos(prefetch_count=settings.max_messages)
        deliveries: list[records.Delivery] = []
        inactivity = max(settings.poll_timeout_ms, 1) / 1000
        for method, properties, body in channel.consume(
            queue, auto_ack=False, inactivity_timeout=inactivity
        ):
            if method is None:
                break
            deliveries.append(
                records.Delivery(
                    epoch=0,
                    tag=method.delivery_tag,
                    redelivered=bool(method.redelivered),
                    exchange=method.exchange,
                    routing_key=method.routing_key,
                    properties=properties,
                    body=body,
                    received_at_us=time.time_ns() // 1000,
                )
            )
            if len(deliveries) >= settings.max_messages:
                break
        if deliveries:
            yield records.to_record_batch(deliveries, first_seq=1, queue=queue)
            if settings.batch_mode == "drain":
                channel.basic_ack(delivery_tag=deliveries[-1].tag, multiple=True)
    finally:
        if connection.is_open:
            connection.close()


def _cannot_connect(
    error: BaseException, params: pika.ConnectionParameters, queue: str
) -> HutchConnectionError:
    description = failures.connect_failure(error, connections.endpoint(params))
    return HutchConnectionError(f"hutch: cannot read queue {queue!r}: {description}")
