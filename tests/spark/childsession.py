"""What the streaming drivers the kill tests start as processes share (never collected).

Why: driver_child.py and stream_child.py each start a local-mode session the same way and run
their query until a condition holds or it fails; two copies drift (one printed the query's
failure for the parent, the other did not). Run as scripts, the children import this module
from their own directory.
"""

import os
import sys
import time
from collections.abc import Callable
from typing import Any

DEADLINE_S = 240  # a child that never reaches its condition ends; the parent's test fails


def local_session() -> Any:
    """A local[2] session with the `hutch` source registered, this interpreter as the
    workers' Python, no UI and two shuffle partitions (the test inputs are small)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import hutch_spark
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    hutch_spark.register(spark)
    return spark


def run_until(spark: Any, query: Any, done: Callable[[], bool], settle_s: float = 0.0) -> None:
    """Polls ``done`` every 0.2 s while the query runs, waits ``settle_s`` more once it holds,
    then stops the query and the session and exits: 1 (with the failure on stderr for the
    parent) if the query failed, else 0."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and query.exception() is None:
        if done():
            time.sleep(settle_s)
            break
        time.sleep(0.2)
    failure = query.exception()
    query.stop()
    spark.stop()
    if failure is not None:
        print(f"query failed: {failure}", file=sys.stderr)  # noqa: T201 - the parent reads it
    sys.exit(1 if failure is not None else 0)
