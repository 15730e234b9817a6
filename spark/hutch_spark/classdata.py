"""The hutch-spark image's class-data archive (AppCDS): Spark's classes, parsed ahead of time.

Why: a Spark JVM loads and verifies some ten thousand classes from 200-odd jars before it does
any work, and on a small node that is most of a short job's time: a local-mode query on 2 cores
went from 15 s to 8 s with an archive. The image records one at build time (``train``, from
``hutch_spark.training``, a local-mode run of the windowed_counts query) and every driver and
executor JVM maps it (``-XX:SharedArchiveFile``) instead of loading those classes again.

The JVM uses an archive only if the classpath it was made with is a prefix of the JVM's own,
jar by jar with sizes and modification times, and only if no directory in that prefix has
files in it. Two consequences for the entrypoint:

- the classpath starts with Spark's jars listed by name in sorted order (``jars``), not
  ``jars/*``: the JVM expands a wildcard in directory order, which differs between the
  filesystem the image was built on and the one a node unpacks it to;
- Spark's conf directory (the mounted ``spark.properties``) comes after the jars, not before.
  No jar of Spark's has a file at its root that the conf directory would shadow (log4j2,
  ``*-site.xml``), so lookups are unchanged.

An archive that no longer matches (a user image that adds jars, another JVM) is simply not
used: ``find`` compares the jars with the list recorded beside the archive, so the JVM never
sees a mismatch and never prints one.

    SPARK_HOME=/opt/spark python3 -m hutch_spark.classdata /opt/hutch/spark-classes.jsa
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ENV = "HUTCH_SPARK_CLASS_DATA"  # the archive's path; set in the image (spark/jobs/Dockerfile)
SUBMIT = "org.apache.spark.deploy.SparkSubmit"
LAUNCHER = "org.apache.spark.launcher.Main"
NO_PERF_DATA = "-XX:-UsePerfData"  # every JVM here: no /tmp/hsperfdata_* left in the image layer


@dataclass(frozen=True)
class ClassData:
    """An archive the JVM will accept, and the jars (in order) it must lead the classpath."""

    archive: str
    jars: tuple[str, ...]

    @property
    def classpath(self) -> str:
        return ":".join(self.jars)

    @property
    def java_option(self) -> str:
        return f"-XX:SharedArchiveFile={self.archive}"


def jars(home: str) -> tuple[str, ...]:
    """Spark's jars by name, sorted: the same list wherever the image is unpacked."""
    directory = Path(home) / "jars"
    return tuple(sorted(str(path) for path in directory.glob("*.jar")))


def with_submit_option(env: Mapping[str, str], option: str) -> dict[str, str]:
    """``env`` with ``option`` appended to ``SPARK_SUBMIT_OPTS``: the options spark-class gives
    the JVM that spark-submit itself runs in (a client-mode driver's JVM), after the user's."""
    opts = env.get("SPARK_SUBMIT_OPTS", "")
    return {**env, "SPARK_SUBMIT_OPTS": f"{opts} {option}".strip()}


def recorded(archive: str) -> Path:
    """Where ``train`` records the jars an archive was made with."""
    return Path(f"{archive}.classpath")


def find(env: Mapping[str, str], home: str) -> ClassData | None:
    """The image's archive, if ``ENV`` names one that was made with exactly these jars."""
    archive = env.get(ENV)
    if not archive or not Path(archive).is_file():
        return None
    try:
        made_with = tuple(recorded(archive).read_text(encoding="utf-8").split(":"))
    except OSError:
        return None
    current = jars(home)
    return ClassData(archive, current) if made_with == current else None


def spark_submit_command(home: str, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The JVM command spark-submit would exec for ``args``, from Spark's own launcher.

    Its module options (``--add-opens`` and the rest Java 17 needs), memory and main class
    are Spark's; only the classpath is then replaced (``recording``).
    """
    scala = next(
        (Path(jar).name.split("_")[1].split("-")[0] for jar in jars(home)
         if Path(jar).name.startswith("spark-core_")),
        "2.13",
    )  # fmt: skip
    launcher = ["java", "-Xmx128m", NO_PERF_DATA, "-cp", f"{home}/jars/*", LAUNCHER, SUBMIT, *args]
    out = subprocess.run(  # noqa: S603 - Spark's launcher, as spark-class runs it
        launcher,
        env={**env, "SPARK_HOME": home, "SPARK_SCALA_VERSION": scala},
        check=True,
        capture_output=True,
    ).stdout
    return [part.decode().strip() for part in out.split(b"\0") if part.strip()]


def recording(command: Sequence[str], data: ClassData) -> list[str]:
    """``command`` (a JVM's) recording ``data.archive`` at exit, with ``data.jars`` alone as
    its classpath: the list every driver and executor classpath starts with."""
    cmd = list(command)
    at = cmd.index("-cp")
    cmd[at + 1] = data.classpath
    # -Xlog: the dump lists every class it skips (not linked, old bytecode) as a warning.
    return [
        cmd[0],
        f"-XX:ArchiveClassesAtExit={data.archive}",
        "-Xlog:cds=error",
        NO_PERF_DATA,
        *cmd[1:],
    ]


def train(archive: str, home: str) -> ClassData:
    """Runs ``hutch_spark.training`` in local mode, recording the archive, then writes the
    jars it was made with beside it; raises if the run fails or writes no archive."""
    from hutch_spark import training  # noqa: PLC0415 - pyspark is needed only here

    data = ClassData(archive, jars(home))
    with tempfile.TemporaryDirectory(prefix="hutch-classdata-") as work:
        env = {**os.environ, "SPARK_HOME": home, training.DIR_ENV: work}
        env.setdefault("PYSPARK_PYTHON", sys.executable)  # this Python has hutch_spark
        # Local mode on loopback: an image build's host name need not resolve.
        env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_HOSTNAME="localhost")
        env.pop(ENV, None)
        args = ["--master", "local[2]", "--conf", "spark.ui.enabled=false", training.__file__]
        command = recording(spark_submit_command(home, args, env), data)
        result = subprocess.run(command, cwd=work, env=env, check=False)  # noqa: S603
    if result.returncode != 0 or not Path(archive).is_file():
        raise RuntimeError(f"class-data training failed (exit {result.returncode})")
    check = subprocess.run(  # noqa: S603 - -Xshare:on fails if the JVM would not use it
        [
            command[0],
            "-Xshare:on",
            NO_PERF_DATA,
            data.java_option,
            "-cp",
            data.classpath,
            "-version",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if check.returncode != 0:
        raise RuntimeError(f"the JVM refuses the archive it recorded: {check.stderr.strip()}")
    recorded(archive).write_text(data.classpath, encoding="utf-8")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: SPARK_HOME=... python3 -m hutch_spark.classdata <archive.jsa>\n")
        return 2
    home = os.environ.get("SPARK_HOME")
    if not home:  # the image sets it (spark/jobs/Dockerfile); the archive records its paths
        sys.stderr.write("classdata: SPARK_HOME is not set\n")
        return 2
    data = train(args[0], home)
    size = Path(data.archive).stat().st_size
    sys.stdout.write(f"{data.archive}: {size / 2**20:.0f} MiB, {len(data.jars)} jars\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
