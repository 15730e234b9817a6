"""The stream source's row schema, and stream deliveries as Arrow record batches.

Why a schema of its own: a stream row is identified by where it is, `(stream, offset)`, as a
Kafka row is by `(topic, partition, offset)`; the classic source's `seq`, `queue` and
`redelivered` describe a consumption that does not happen here (a stream is read, not taken, and
every read of an offset gives the same message). The message columns are the classic source's,
converted by the same rules (records.py), so a query can move from one source to the other by
changing its key columns only.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from hutch_spark import records

_MESSAGE_FIELDS = [
    field for field in records.SCHEMA.fields if field.name not in ("seq", "queue", "redelivered")
]

SCHEMA = StructType(
    [
        StructField("stream", StringType(), nullable=False),
        StructField("offset", LongType(), nullable=False),
        *_MESSAGE_FIELDS,
    ]
)


@dataclass(slots=True)
class StreamDelivery:
    """One message read from a stream by an executor (`properties`: pika BasicProperties)."""

    offset: int
    exchange: str
    routing_key: str
    properties: Any
    body: bytes
    received_at_us: int


@functools.cache
def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects from `read()` for SCHEMA (timestamps in UTC)."""
    return to_arrow_schema(SCHEMA, timezone="UTC")


def to_record_batch(stream: str, deliveries: Sequence[StreamDelivery]) -> pa.RecordBatch:
    """Columns for `deliveries` of `stream`, in the order of SCHEMA."""
    schema = arrow_schema()
    props = [delivery.properties for delivery in deliveries]
    columns: list[list[Any]] = [
        [stream] * len(deliveries),
        [delivery.offset for delivery in deliveries],
        [p.message_id for p in props],
        [delivery.exchange for delivery in deliveries],
        [delivery.routing_key for delivery in deliveries],
        [records._header_entries(p.headers) for p in props],
        [records._property_entries(p) for p in props],
        [p.content_type for p in props],
        [p.correlation_id for p in props],
        [None if p.timestamp is None else int(p.timestamp) * 1_000_000 for p in props],
        [delivery.received_at_us for delivery in deliveries],
        [delivery.body for delivery in deliveries],
    ]
    arrays = [
        pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
