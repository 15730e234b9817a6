"""examples/spark-stream-copy.py's ``start()``: which trigger each way of running it gets.

Why: the job has two ways of running, and only the node test (tests/localkube/
test_spark_stream_node.py) ran the one with ``--processing-time``, a run that lasts until it is
killed; the fast test beside it checks that the argument reaches the job's arguments, not that
``start()`` turns it into a processing-time trigger. Here ``start()`` runs against a session
that records the builder calls (no JVM), so dropping either branch fails in no time.
"""

from __future__ import annotations

from typing import Any

from tests.spark.examples import load_example

JOB = "spark-stream-copy.py"
ARGS = ["--streams", "s0,s1", "--checkpoint", "/data/ck", "--output", "/data/out"]


class Conf(dict[str, str]):
    """``spark.conf`` and ``sparkContext.getConf()``: nothing configured, sets recorded."""

    def set(self, key: str, value: str) -> None:
        self[key] = value


class Session:
    """A SparkSession's builder chains, recorded: every call returns the session itself."""

    CHAINS = ("readStream", "writeStream", "dataSource")  # properties that start a chain

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.conf = Conf()
        self.sparkContext = self  # getConf() below

    def getConf(self) -> Conf:  # noqa: N802 - Spark's name
        return Conf()

    def __getattr__(self, name: str) -> Any:
        if name in self.CHAINS:
            return self

        def call(*args: Any, **kwargs: Any) -> Session:
            self.calls.append((name, args, kwargs))
            return self

        return call

    def triggers(self) -> list[dict[str, Any]]:
        return [kwargs for name, _, kwargs in self.calls if name == "trigger"]


def test_processing_time_runs_until_stopped_a_batch_at_most_that_often() -> None:
    job, spark = load_example(JOB), Session()
    job.start(spark, job.parse_args([*ARGS, "--processing-time", "2 seconds"]))
    assert spark.triggers() == [{"processingTime": "2 seconds"}]
    assert spark.calls[-1][0] == "start"


def test_without_it_the_job_reads_what_the_streams_held_and_stops() -> None:
    job, spark = load_example(JOB), Session()
    job.start(spark, job.parse_args(ARGS))
    assert spark.triggers() == [{"availableNow": True}]
    options = dict(args for name, args, _ in spark.calls if name == "option")
    assert options["streams"] == "s0,s1"
    assert (options["path"], options["checkpointLocation"]) == ("/data/out", "/data/ck")
    assert ("format", ("parquet",), {}) in spark.calls
    assert spark.calls[-1][0] == "start"
