"""What the streaming drivers the kill tests start as processes share (never collected).

Why: driver_child.py and stream_child.py each start a local-mode session the same way and run
their query until a condition holds or it fails; two copies drift (one printed the query's
failure for the parent, the other did not). Run as scripts, the children import this module
from their own directory.

A child has no deadline of its own: on a loaded machine a healthy run takes longer than any
fixed bound, and the parent tells slow from stuck by the run's progress. What ends a child
whose parent test is gone (failed, timed out, killed) is that: the parent it was started by is
no longer its parent.
"""

import os
import sys
import time
from collections.abc import Callable
from typing import Any

PARENT = os.getppid()  # read at import, first thing in a child: the test that started it


def parent_gone() -> bool:
    """Whether the process that started this one has ended (this one was re-parented)."""
    return os.getppid() != PARENT


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


class Queries:
    """Several queries as one for ``run_until``: failed when any failed, stopped together."""

    def __init__(self, queries: list[Any]) -> None:
        self.queries = queries

    def exception(self) -> Any:
        return next((q.exception() for q in self.queries if q.exception() is not None), None)

    def stop(self) -> None:
        for query in self.queries:
            query.stop()


def run_until(spark: Any, query: Any, done: Callable[[], bool], settle_s: float = 0.0) -> None:
    """Polls ``done`` every 0.2 s while the query runs, waits ``settle_s`` more once it holds,
    then stops the query and the session and exits: 1 (with the failure on stderr for the
    parent) if the query failed, else 0.

    If the parent is gone first, exits 2 at once without stopping anything: a stop can wait on
    a task the test made block, and the session's JVM ends when this process does (it reads
    its stdin until it closes), its Python workers with it."""
    while query.exception() is None:
        if parent_gone():
            print("the parent is gone: ending", file=sys.stderr, flush=True)  # noqa: T201
            os._exit(2)
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
