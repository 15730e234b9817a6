"""The stream source's row schema.

Why a schema of its own: a stream row is identified by where it is, `(stream, offset)`, as a
Kafka row is by `(topic, partition, offset)`; the classic source's `seq`, `queue` and
`redelivered` describe a consumption that does not happen here (a stream is read, not taken, and
every read of an offset gives the same message). The message columns are the classic source's,
converted by the same rules (records.py; the executor's parser, streamframes.py, applies them),
so a query can move from one source to the other by changing its key columns only.
"""

from __future__ import annotations

import functools

import pyarrow as pa
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


@functools.cache
def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects from `read()` for SCHEMA: the message columns' fields are
    records.arrow_schema()'s, so the two sources cannot drift apart."""
    message = records.arrow_schema()
    return pa.schema(
        [
            pa.field("stream", pa.string(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            *(message.field(field.name) for field in _MESSAGE_FIELDS),
        ]
    )
