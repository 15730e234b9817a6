"""Whether a Spark conf was set by the user, and a default that never overrides one.

Why: the job picks better defaults than Spark's for a few confs (8 shuffle partitions instead
of 200, the FileSystem-based checkpoint manager for a local checkpoint), and a value the user
gave with ``spark-submit --conf``, ``spark-defaults.conf``, the builder or ``spark.conf.set``
must always win. Those arrive in two places: the SparkContext's conf (spark-submit, defaults
file, builder) and the session's runtime conf; this asks both, in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Spark's Python workers over a Unix domain socket instead of TCP on loopback (Spark 4.1+, off by
# default). Over TCP, each task of a Python data source (this source's reads on the executors)
# waited about 40 ms for its input: the JVM writes the Arrow stream's schema and its one batch
# as separate small writes, and the second waits for the worker's delayed ACK (measured
# 2026-12-01: 37-47 ms of a stream micro-batch's 130 ms, gone with the socket). A core conf:
# it must be set when Spark starts (spark-submit --conf, the builder), not on a running session.
PYTHON_SOCKETS = "spark.python.unix.domain.socket.enabled"


def python_sockets_advice(value: str | None) -> str | None:
    """What to tell a user whose `PYTHON_SOCKETS` is `value` (None: not set), or None."""
    if value is not None and value.strip().lower() == "true":
        return None
    return (
        f"hutch: Spark's Python workers talk to the JVM over TCP ({PYTHON_SOCKETS} is "
        f"{'not set' if value is None else repr(value)}): each task reading from Hutch then "
        f"waits about 40 ms for its input; start Spark with --conf {PYTHON_SOCKETS}=true "
        '(docs/spark.md, "Spark settings for the source")'
    )


def configured(spark: SparkSession, key: str) -> str | None:
    """The value set for ``key`` anywhere the user can set it, or None (Spark's own default
    does not count)."""
    value = spark.sparkContext.getConf().get(key)
    return value if value is not None else spark.conf.get(key, None)


def set_default(spark: SparkSession, key: str, value: str) -> None:
    """Sets ``key`` on the session unless the user configured it."""
    if configured(spark, key) is None:
        spark.conf.set(key, value)
