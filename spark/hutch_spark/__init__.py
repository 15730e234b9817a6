"""hutch_spark: the PySpark data source `hutch` for Hutch queues (and any AMQP 0-9-1 broker).

Register it once per SparkSession, then use `format("hutch")`:

    import hutch_spark
    hutch_spark.register(spark)
    stream = spark.readStream.format("hutch").option("queue", "events").load()

The streaming source is at-least-once and acks a message only after Spark committed the batch
that holds it; the sink publishes with confirms. Contract: docs/contracts/spark.md; user guide:
docs/spark.md. This package imports neither hutch_operator nor hutch_broker, and importing it
does not import pyspark (the option rules are usable without Spark).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Registers the `hutch` data source with `spark` (idempotent), with a warning when the
    session's Python workers use TCP (`sessionconf.PYTHON_SOCKETS` says what that costs)."""
    from hutch_spark import sessionconf  # noqa: PLC0415 - keeps pyspark optional
    from hutch_spark.source import HutchDataSource  # noqa: PLC0415

    spark.dataSource.register(HutchDataSource)
    advice = sessionconf.python_sockets_advice(
        sessionconf.configured(spark, sessionconf.PYTHON_SOCKETS)
    )
    if advice is not None:
        logging.getLogger(__name__).warning(advice)
