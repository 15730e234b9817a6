"""The checkpoint file manager: local checkpoints avoid Hadoop's forked readlink/chmod."""

from pathlib import Path
from typing import Any

import pytest
from hutch_spark import checkpoints


@pytest.mark.parametrize(
    ("location", "local"),
    [
        ("/data/checkpoint", True),
        ("relative/ckpt", True),
        ("file:///data/checkpoint", True),
        ("FILE:///data/checkpoint", True),
        ("s3a://bucket/ckpt", False),
        ("hdfs://namenode:8020/ckpt", False),
        ("abfss://c@account.dfs.core.windows.net/ckpt", False),
    ],
)
def test_only_local_paths_count_as_local(location: str, local: bool) -> None:
    assert checkpoints.is_local(location) is local


def test_a_local_checkpoint_gets_the_file_system_manager() -> None:
    assert checkpoints.confs_for("/data/checkpoint", lambda _key: None) == {
        checkpoints.CONF: checkpoints.FILE_SYSTEM_MANAGER
    }


def test_remote_stores_keep_sparks_choice() -> None:
    assert checkpoints.confs_for("s3a://bucket/ckpt", lambda _key: None) == {}


def test_a_configured_manager_wins() -> None:
    mine = "com.example.MyManager"
    assert checkpoints.confs_for("/data/ckpt", {checkpoints.CONF: mine}.get) == {}


def _manager_class(spark: Any, location: Path) -> str:
    """The class Spark's own factory picks for `location` under the session's confs."""
    jvm = spark._jvm
    factory = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    return str(factory.create(jvm.org.apache.hadoop.fs.Path(location.as_uri()), conf)
               .getClass().getName())  # fmt: skip


@pytest.mark.spark
def test_the_jobs_session_makes_spark_pick_that_manager(spark: Any, tmp_path: Path) -> None:
    """The class name exists in the pinned pyspark and Spark's factory honours the conf the job
    sets; a wrong name would only fail when a query starts."""
    from hutch_spark.jobs import windowed_counts

    assert spark.conf.get(checkpoints.CONF, None) is None
    assert _manager_class(spark, tmp_path).endswith("FileContextBasedCheckpointFileManager")
    try:
        assert windowed_counts.session(None, str(tmp_path)) is spark
        assert _manager_class(spark, tmp_path) == checkpoints.FILE_SYSTEM_MANAGER
    finally:
        spark.conf.unset(checkpoints.CONF)
