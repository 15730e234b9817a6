"""Which checkpoint file manager a query with a checkpoint on a local (or mounted) disk uses.

Why: every micro-batch writes an offset-log entry before it runs and a commit-log entry after
it (the commit is what lets the `hutch` source ack), and a stateful query writes state-store
files too: each a temp file renamed into place. Spark's default manager does that through
Hadoop's FileContext, and Hadoop's local file system, without its native library (the pyspark
wheel and the hutch-spark image ship none), forks `readlink` twice per rename and `chmod` per
created file. Measured on this project's 2-core machine (pyspark 4.3, rate source, 200 ms
trigger, medians): walCommit 57 ms and commitOffsets 88 ms per batch with the default, 20 ms
and 17 ms with the FileSystem-based manager; on the `hutch` source at a 200 ms trigger the p50
publish-to-batch latency went from 329 ms to 214 ms (docs/spark.md, "A checkpoint on a local
disk or a PVC").

The FileSystem-based manager renames with `java.io.File.renameTo`, which on a local file
system is rename(2): atomic, which is what Spark requires of a checkpoint manager (its warning
that FileSystem renames may not be atomic is about other stores). Checks before the rename are
check-then-act under both managers, so nothing is lost by the switch. Other stores (hdfs:, s3a:,
abfs: ...) keep Spark's own choice, and a manager set explicitly always wins.

`confs_for` decides (pure); `configure` applies it to a session, for the job
(jobs/windowed_counts.py) and the benchmarks.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING

from hutch_spark import sessionconf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONF = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
_LOCAL_SCHEMES = ("", "file")


def is_local(location: str) -> bool:
    """A bare path or a file: URI (a local disk or a mounted volume such as a PVC)."""
    return urllib.parse.urlsplit(location).scheme.lower() in _LOCAL_SCHEMES


def confs_for(location: str, configured: Callable[[str], str | None]) -> dict[str, str]:
    """The confs to set for a checkpoint at `location`: the FileSystem-based manager when it is
    local and `configured(CONF)` (the session's value, if any) is unset; otherwise none."""
    if not is_local(location) or configured(CONF):
        return {}
    return {CONF: FILE_SYSTEM_MANAGER}


def configure(spark: SparkSession, location: str) -> None:
    """Sets `confs_for(location)` on `spark` (a value spark-submit or the session set wins)."""
    wanted = confs_for(location, lambda key: sessionconf.configured(spark, key))
    for key, value in wanted.items():
        spark.conf.set(key, value)
