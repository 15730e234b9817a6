"""hutch_spark.sessionconf against a real session: a user's value is seen wherever it was set,
Spark's own default is not, and the job's defaults never override the user's."""

from __future__ import annotations

from typing import Any

import pytest
from hutch_spark import sessionconf

pytestmark = pytest.mark.spark

UNSET = "spark.sql.streaming.minBatchesToRetain"  # Spark's default: 100; nobody here sets it


def test_a_value_from_the_builder_counts_and_sparks_own_default_does_not(spark: Any) -> None:
    # tests/spark/conftest.py's builder sets 2, i.e. the SparkContext's conf (as spark-submit).
    assert sessionconf.configured(spark, "spark.sql.shuffle.partitions") == "2"
    assert spark.conf.get(UNSET) == "100"
    assert sessionconf.configured(spark, UNSET) is None


def test_a_value_set_on_the_session_counts_and_defaults_never_override(spark: Any) -> None:
    try:
        sessionconf.set_default(spark, "spark.sql.shuffle.partitions", "8")
        assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
        sessionconf.set_default(spark, UNSET, "7")
        assert sessionconf.configured(spark, UNSET) == "7"
        sessionconf.set_default(spark, UNSET, "9")
        assert spark.conf.get(UNSET) == "7"
    finally:
        spark.conf.unset(UNSET)


def test_the_sessions_python_socket_is_seen_so_register_gives_no_advice(spark: Any) -> None:
    # tests/spark/conftest.py's builder enables it, as docs/spark.md has users start Spark
    value = sessionconf.configured(spark, sessionconf.PYTHON_SOCKETS)
    assert value == "true"
    assert sessionconf.python_sockets_advice(value) is None
