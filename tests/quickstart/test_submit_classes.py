"""The host spark-submit JVM's class data (hutch_demo.submitclasses).

Why: the archive is recorded by a real submission and mapped by the next; a wrong rule does not
fail, it either costs every run the parsing again (an archive the JVM refuses, or one never
kept) or lets two first runs write one file. These pin the rules with files, and run Spark's
own spark-submit twice to show that the second JVM can map what the first recorded (the
launcher's classpath is the same from run to run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import launchers, sparkpods, sparksubmit, submitclasses


def _spark(tmp_path: Path) -> tuple[str, str]:
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "core.jar").write_bytes(b"PK")
    java = tmp_path / "java"
    java.write_bytes(b"\x7fELF")
    return str(home), str(java)


def test_the_first_submission_records_and_the_next_maps_what_it_kept(tmp_path):
    home, java = _spark(tmp_path)
    first = submitclasses.prepare(tmp_path / "cache", home, java)
    assert first is not None and first.pending is not None
    assert first.java_option == f"-XX:ArchiveClassesAtExit={first.pending}"
    assert str(os.getpid()) in first.pending.name  # one file per recording process
    first.pending.write_bytes(b"jsa")  # the JVM recorded at exit
    first.settle(succeeded=True)
    assert first.archive.read_bytes() == b"jsa"
    second = submitclasses.prepare(tmp_path / "cache", home, java)
    assert second is not None and second.pending is None
    assert second.java_option == f"-XX:SharedArchiveFile={first.archive}"
    second.settle(succeeded=True)  # nothing recorded, nothing moved
    assert first.archive.read_bytes() == b"jsa"


def test_a_failed_submission_keeps_nothing(tmp_path):
    home, java = _spark(tmp_path)
    classes = submitclasses.prepare(tmp_path / "cache", home, java)
    assert classes is not None and classes.pending is not None
    pending = classes.pending
    pending.write_bytes(b"half")
    classes.settle(succeeded=False)
    assert not pending.exists() and not classes.archive.exists()


def test_another_jvm_or_other_jars_get_another_archive(tmp_path):
    home, java = _spark(tmp_path)
    before = submitclasses.key(home, java)
    assert submitclasses.key(home, java) == before
    (Path(home) / "jars" / "core.jar").write_bytes(b"PK-new")
    assert submitclasses.key(home, java) != before
    changed = submitclasses.key(home, java)
    Path(java).write_bytes(b"\x7fELF-other")
    assert submitclasses.key(home, java) != changed


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_a_recording_abandoned_by_a_process_that_is_gone_is_removed(tmp_path):
    home, java = _spark(tmp_path)
    directory = tmp_path / "cache" / submitclasses.SUBDIR
    directory.mkdir(parents=True)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    abandoned = directory / f"x.jsa.{gone}.pending"
    live = directory / f"x.jsa.{os.getpid()}.pending"
    abandoned.write_bytes(b"half")
    live.write_bytes(b"half")
    submitclasses.prepare(tmp_path / "cache", home, java)
    assert not abandoned.exists() and live.exists()


@pytest.mark.spark
def test_a_second_spark_submit_jvm_maps_what_the_first_recorded(tmp_path):
    """``-Xshare:on`` makes the JVM fail instead of running without the archive."""
    env = sparkpods.environment(tmp_path / "kubeconfig")
    java = shutil.which("java")
    assert java is not None
    classes = submitclasses.prepare(tmp_path / "cache", env["SPARK_HOME"], java)
    assert classes is not None

    def version(options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(sparkpods.SPARK_SUBMIT), "--version"],
                              env={**env, "SPARK_SUBMIT_OPTS": options},
                              capture_output=True, text=True, check=False)  # fmt: skip

    recorded = version(classes.java_option)
    assert recorded.returncode == 0, recorded.stderr
    classes.settle(succeeded=True)
    mapped = submitclasses.prepare(tmp_path / "cache", env["SPARK_HOME"], java)
    assert mapped is not None and mapped.pending is None
    shared = version(f"-Xshare:on {mapped.java_option}")
    assert shared.returncode == 0, shared.stderr
    assert "version 4.3.0" in shared.stderr + shared.stdout


class _Driver:
    """The one call ``PodJob`` makes of its cluster here: GET the driver Pod."""

    def __init__(self, phase: str) -> None:
        self.phase = phase

    def get(self, path: str) -> dict[str, Any]:
        return {"status": {"phase": self.phase}}


def _job(tmp_path: Path, code: str, phase: str) -> sparkpods.PodJob:
    """A PodJob whose spark-submit is a real child running ``code``, recording into pending."""
    home, java = _spark(tmp_path)
    classes = submitclasses.prepare(tmp_path / "cache", home, java)
    assert classes is not None and classes.pending is not None
    classes.pending.write_bytes(b"jsa")
    child = launchers.spawn("spark-submit", [sys.executable, "-c", code],
                            tmp_path / "submit.log", dict(os.environ))  # fmt: skip
    sub = sparksubmit.Submission(api_server="https://127.0.0.1:1", namespace="ns", broker="b",
                                 queue="q", credentials_secret="s", claim="c",
                                 pod_template=tmp_path / "t.json")  # fmt: skip
    return sparkpods.PodJob(_Driver(phase), sub, child, tmp_path, classes)  # type: ignore[arg-type]


@pytest.mark.broker  # starts processes (hutch_testing.levels)
@pytest.mark.parametrize(
    ("code", "phase", "kept"),
    [
        ("pass", "Succeeded", True),
        ("raise SystemExit(1)", "Succeeded", False),
        ("pass", "Failed", False),
    ],
)
def test_finish_keeps_the_recording_only_when_the_job_succeeded(tmp_path, code, phase, kept):
    job = _job(tmp_path, code, phase)
    assert job.classes is not None
    archive, pending = job.classes.archive, job.classes.pending
    job.child.proc.wait()
    assert job.failure() is None if kept else job.failure() is not None
    assert pending is not None and pending.exists()  # failure() only asks
    assert (job.finish() is None) == kept
    assert archive.exists() == kept and not pending.exists()


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_finish_while_spark_submit_runs_leaves_the_recording_pending(tmp_path):
    job = _job(tmp_path, "import time; time.sleep(30)", "Running")
    assert job.classes is not None
    pending = job.classes.pending
    try:
        assert job.finish() is None
        assert pending is not None and pending.exists() and not job.classes.archive.exists()
    finally:
        job.child.stop()


def test_only_the_most_recently_used_archives_are_kept(tmp_path):
    """Every new venv records its own archive; the least recently used beyond KEEP go, and the
    one a submission maps counts as used."""
    directory = tmp_path / "cache" / submitclasses.SUBDIR
    directory.mkdir(parents=True)
    old = [directory / f"old{n}.jsa" for n in range(submitclasses.KEEP + 1)]
    for age, path in enumerate(old):
        path.write_bytes(b"jsa")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))  # old0 the newest of them
    home, java = _spark(tmp_path)
    mapped = directory / f"{submitclasses.key(home, java)}.jsa"
    mapped.write_bytes(b"jsa")
    os.utime(mapped, (1, 1))  # the oldest file, but used by this submission
    assert submitclasses.prepare(tmp_path / "cache", home, java) is not None
    assert sorted(p.name for p in directory.glob("*.jsa")) == sorted(
        [mapped.name] + [p.name for p in old[: submitclasses.KEEP - 1]]
    )
    mapped.unlink()  # the next submission records: it leaves room for the one it makes
    old[-1].write_bytes(b"jsa")
    os.utime(old[-1], (1, 1))
    recording = submitclasses.prepare(tmp_path / "cache", home, java)
    assert recording is not None and recording.pending is not None
    assert sorted(p.name for p in directory.glob("*.jsa")) == sorted(
        p.name for p in old[: submitclasses.KEEP - 1]
    )
