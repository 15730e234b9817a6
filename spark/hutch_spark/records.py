"""The source's row schema and the conversion of AMQP deliveries into Arrow record batches.

Why Arrow: rows travel from the driver to executors inside pickled input partitions, and an
executor's `read()` may return `pyarrow.RecordBatch`es directly. Building the columns once on
the driver (C-speed array construction) and pickling the batch is cheaper than pickling tuples
and converting them row by row on the executor, and the same batch is what durable-batch mode
writes to disk (batchlog.py). The Arrow schema is derived from the Spark schema with pyspark's
own converter, because Spark rejects a batch whose schema differs in any detail.

Column rules (docs/contracts/spark.md#schema): `headers` values are strings (numbers and booleans
via `str()`, bytes as UTF-8 else base64, nested tables and arrays as JSON); `properties` holds the
other basic properties that are set (reply_to, expiration, priority, type, user_id, app_id,
delivery_mode, content_encoding, cluster_id); `received_at` is the driver's receive time, never
null, and the column to put a watermark on; `timestamp` is the AMQP property (nullable); `queue` is
the queue the message was read from (`seq` counts per queue).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_TEXT_MAP = MapType(StringType(), StringType(), valueContainsNull=True)

SCHEMA = StructType(
    [
        StructField("seq", LongType(), nullable=False),
        StructField("message_id", StringType()),
        StructField("exchange", StringType()),
        StructField("routing_key", StringType()),
        StructField("headers", _TEXT_MAP),
        StructField("properties", _TEXT_MAP),
        StructField("content_type", StringType()),
        StructField("correlation_id", StringType()),
        StructField("timestamp", TimestampType()),
        StructField("received_at", TimestampType(), nullable=False),
        StructField("redelivered", BooleanType(), nullable=False),
        StructField("body", BinaryType(), nullable=False),
        StructField("queue", StringType(), nullable=False),
    ]
)

_OTHER_PROPERTIES = (
    "reply_to",
    "expiration",
    "priority",
    "type",
    "user_id",
    "app_id",
    "delivery_mode",
    "content_encoding",
    "cluster_id",
)


@dataclass(slots=True)
class Delivery:
    """One message as the consumer thread received it (`properties`: pika BasicProperties or
    hutch_spark.properties.Properties; both have the same attributes)."""

    epoch: int
    tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties: Any
    body: bytes
    received_at_us: int


@functools.cache
def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects from `read()` for SCHEMA (timestamps in UTC)."""
    return to_arrow_schema(SCHEMA, timezone="UTC")


def to_record_batch(
    deliveries: Sequence[Delivery], *, first_seq: int, queue: str
) -> pa.RecordBatch:
    """Columns for `deliveries` of `queue`, numbering them first_seq, first_seq + 1, ..."""
    schema = arrow_schema()
    props = [delivery.properties for delivery in deliveries]
    columns: list[list[Any]] = [
        list(range(first_seq, first_seq + len(deliveries))),
        [p.message_id for p in props],
        [delivery.exchange for delivery in deliveries],
        [delivery.routing_key for delivery in deliveries],
        [_header_entries(p.headers) for p in props],
        [_property_entries(p) for p in props],
        [p.content_type for p in props],
        [p.correlation_id for p in props],
        [None if p.timestamp is None else int(p.timestamp) * 1_000_000 for p in props],
        [delivery.received_at_us for delivery in deliveries],
        [delivery.redelivered for delivery in deliveries],
        [delivery.body for delivery in deliveries],
        [queue] * len(deliveries),
    ]
    arrays = [
        pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def header_text(value: object) -> str | None:
    """A header value as text: the one rule shared by `headers` and nested JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return _bytes_text(value)
    if isinstance(value, dict | list):
        return json.dumps(value, default=_json_default, separators=(",", ":"))
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return str(value)


def _header_entries(headers: dict[str, object] | None) -> list[tuple[str, str | None]] | None:
    if headers is None:
        return None
    return [(str(key), header_text(value)) for key, value in headers.items()]


def _property_entries(props: Any) -> list[tuple[str, str]]:
    entries = []
    for name in _OTHER_PROPERTIES:
        value = getattr(props, name)
        if value is not None:
            entries.append((name, str(value)))
    return entries


def _bytes_text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(value).decode("ascii")


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return _bytes_text(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return repr(value)
