"""Class data for this host's spark-submit JVM: recorded by the first submission, mapped after.

Why: make run's Spark step starts a spark-submit JVM here that loads Spark's core, its launcher
and the Kubernetes client before it creates the driver Pod, then watches the Pod to its end.
With those classes archived (JDK AppCDS, as the hutch-spark image does for the JVMs in its Pods:
hutch_spark.classdata), later submissions skip the parsing: the Spark step's median went from
50 s to 45.5 s (warm make runs, 5 and 4 of them, interleaved).

There is no build step on the host to record the archive in, so the first submission records it
when its JVM exits (``-XX:ArchiveClassesAtExit``, a few seconds, once), into a file named for its
process, which ``settle`` renames into place only if the submission succeeded: two first runs at
once never write one file, and a failed run leaves nothing half made. The archive's name is a
digest of the JVM and of Spark's jars (names, sizes and times): another pyspark or JDK gets its
own archive instead of one the JVM would refuse. ``HUTCH_CACHE`` is where make run keeps its
other builds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from hutch_spark import classdata

SUBDIR = "spark-submit-classes"
KEEP = 3  # archives (~76 MB each): one per venv or JDK; a few checkouts alternate without loss


def key(home: str, java: str) -> str:
    """A digest of the JVM binary and of the jars the launcher puts on the classpath."""
    digest = hashlib.sha256()
    java_path = Path(java).resolve()
    stat = java_path.stat()
    digest.update(f"{java_path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    for jar in map(Path, classdata.jars(home)):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


@dataclass
class SubmitClasses:
    """The archive of one submission: mapped if it exists, else recorded into ``pending``."""

    archive: Path
    pending: Path | None  # where this submission's JVM records, until ``settle``

    @property
    def java_option(self) -> str:
        if self.pending is None:
            return f"-XX:SharedArchiveFile={self.archive}"
        return f"-XX:ArchiveClassesAtExit={self.pending}"

    def settle(self, succeeded: bool) -> None:
        """After the JVM exited: keep what it recorded if the submission succeeded."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        if succeeded and pending.is_file():
            os.replace(pending, self.archive)
        else:
            pending.unlink(missing_ok=True)


def prepare(cache: Path, home: str, java: str | None = None) -> SubmitClasses | None:
    """The archive for a submission from ``home`` (Spark's), or None without a JVM. The JVM
    is spark-class's: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    java = java or (f"{java_home}/bin/java" if java_home else shutil.which("java"))
    if java is None:
        return None
    directory = cache / SUBDIR
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / f"{key(home, java)}.jsa"
    _remove_abandoned(directory)
    if archive.is_file():
        os.utime(archive)  # used now: the last to go in ``_prune``
        _prune(directory, KEEP)
        return SubmitClasses(archive, None)
    _prune(directory, KEEP - 1)  # room for the one this submission records
    return SubmitClasses(archive, directory / f"{archive.name}.{os.getpid()}.pending")


def _remove_abandoned(directory: Path) -> None:
    """Pending recordings of processes that are gone (a run stopped by Ctrl-C)."""
    for pending in directory.glob("*.pending"):
        pid = pending.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not _alive(int(pid)):
            pending.unlink(missing_ok=True)


def _prune(directory: Path, keep: int) -> None:
    """Archives beyond the ``keep`` most recently used go: every other pyspark or JDK (a new
    venv) records its own. A JVM that maps one keeps its mapping after the unlink."""
    archives = sorted(directory.glob("*.jsa"), key=_last_used, reverse=True)
    for stale in archives[keep:]:
        stale.unlink(missing_ok=True)


def _last_used(archive: Path) -> float:
    try:
        return archive.stat().st_mtime
    except FileNotFoundError:  # another run's prune removed it meanwhile
        return 0.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True
