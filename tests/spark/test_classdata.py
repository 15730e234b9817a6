"""The class-data archive's rules (hutch_spark.classdata) and its training query.

Why: the JVM uses an archive only when the classpath it was made with leads its own, jar by
jar; a wrong order or a stale list does not fail, it silently costs every JVM its start-up
time again. These pin the list, the check against the recorded jars, and the recording
command; the image build records a real archive and checks that the JVM accepts it
(``classdata.train``), and tests/localkube/test_spark_node.py checks that driver and executor JVMs
map it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hutch_spark import classdata, training


def _home(tmp_path: Path, names: list[str]) -> str:
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    for name in names:
        (jars / name).write_bytes(b"PK")
    return str(tmp_path / "spark")


def test_jars_are_listed_by_name_in_sorted_order_and_only_jars(tmp_path):
    home = _home(tmp_path, ["zstd.jar", "a-core.jar", "README", "m.jar"])
    assert classdata.jars(home) == tuple(f"{home}/jars/{n}" for n in ("a-core.jar", "m.jar",
                                                                        "zstd.jar"))  # fmt: skip


def test_an_archive_is_found_only_when_it_was_made_with_these_jars(tmp_path):
    home = _home(tmp_path, ["a.jar", "b.jar"])
    archive = tmp_path / "classes.jsa"
    env = {classdata.ENV: str(archive)}
    assert classdata.find({}, home) is None  # the image names none
    assert classdata.find(env, home) is None  # named, not there
    archive.write_bytes(b"jsa")
    assert classdata.find(env, home) is None  # no record of its jars
    classdata.recorded(str(archive)).write_text(":".join(classdata.jars(home)))
    found = classdata.find(env, home)
    assert found == classdata.ClassData(str(archive), classdata.jars(home))
    assert found.java_option == f"-XX:SharedArchiveFile={archive}"
    (Path(home) / "jars" / "added.jar").write_bytes(b"PK")  # a user image adds a jar
    assert classdata.find(env, home) is None


def test_the_recording_jvm_keeps_sparks_command_with_the_sorted_jars_as_its_classpath():
    data = classdata.ClassData("/opt/a.jsa", ("/s/jars/a.jar", "/s/jars/b.jar"))
    command = ["/usr/bin/java", "-cp", "/s/conf/:/s/jars/*", "-Xmx1g", "--add-opens=x",
               classdata.SUBMIT, "--master", "local[2]", "job.py"]  # fmt: skip
    recorded = classdata.recording(command, data)
    assert recorded[:2] == ["/usr/bin/java", "-XX:ArchiveClassesAtExit=/opt/a.jsa"]
    assert recorded[recorded.index("-cp") + 1] == "/s/jars/a.jar:/s/jars/b.jar"
    assert recorded[recorded.index("-Xmx1g") :] == command[3:]


@pytest.mark.spark
def test_sparks_launcher_gives_the_submit_command_with_its_java_17_options():
    from hutch_spark import entrypoint

    home = entrypoint.spark_home({})
    command = classdata.spark_submit_command(home, ["--master", "local[1]", "x.py"], os.environ)
    assert Path(command[0]).name == "java"
    assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in command
    assert command[command.index(classdata.SUBMIT) :] == [classdata.SUBMIT, "--master",
                                                          "local[1]", "x.py"]  # fmt: skip
    assert f"{home}/jars/" in command[command.index("-cp") + 1]


@pytest.mark.spark
def test_the_training_query_writes_windows_through_the_jobs_own_transformation(spark, tmp_path):
    """A query that wrote nothing would record an archive without the aggregation's and the
    file sink's classes; ``main`` fails the image build then."""
    assert training.run(spark, str(tmp_path)) > 0
    rows = spark.read.parquet(str(tmp_path / "counts")).collect()
    assert {row["type"] for row in rows} == {"click", "view"}
    assert all(row["events"] == 30 for row in rows)  # 60 one-second events per minute, 2 types


def test_recording_needs_an_archive_path_and_spark_home(monkeypatch, capsys):
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert classdata.main([]) == 2
    assert classdata.main(["/tmp/x.jsa"]) == 2
    assert "SPARK_HOME is not set" in capsys.readouterr().err
