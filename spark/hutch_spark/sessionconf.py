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


def configured(spark: SparkSession, key: str) -> str | None:
    """The value set for ``key`` anywhere the user can set it, or None (Spark's own default
    does not count)."""
    value = spark.sparkContext.getConf().get(key)
    return value if value is not None else spark.conf.get(key, None)


def set_default(spark: SparkSession, key: str, value: str) -> None:
    """Sets ``key`` on the session unless the user configured it."""
    if configured(spark, key) is None:
        spark.conf.set(key, value)
