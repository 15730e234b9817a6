"""The hutch-spark image's entrypoint: Spark on Kubernetes' `driver` and `executor` roles.

Why: Spark's Kubernetes backend does not run a command of its own in the Pods it creates; it
passes a role as the container's arguments and expects the image to turn it into a process.
The official Spark images carry a shell script for that; the pyspark wheel (our image's Spark)
carries none. This module is ours, with the translation as a pure function, so it is tested
without a container (tests/spark/test_entrypoint.py):

- ``driver <spark-submit args>`` (Spark passes ``--properties-file``, ``--class`` and the app)
  runs ``spark-submit --deploy-mode client`` inside the Pod, bound to the Pod's address
  (``SPARK_DRIVER_BIND_ADDRESS``, which Spark sets from the downward API);
- ``executor`` starts ``KubernetesExecutorBackend`` on the JVM, from the environment Spark
  gives executor Pods (driver URL, executor id, cores, memory, app id, Pod IP and name,
  resource profile, and the ``SPARK_JAVA_OPT_<n>`` options in numeric order);
- anything else is run as given (``python3 -c ...``, a shell), as Spark's own images do.

Both JVMs map the image's class-data archive when there is one (``hutch_spark.classdata``): the
classpath then starts with Spark's jars by name, and the driver gets them as
``--driver-class-path``. A user's own classpath (``spark.driver.extraClassPath``,
``SPARK_CLASSPATH``) keeps its place in front of Spark's jars, and the archive is then not used.

The image runs it under tini, which reaps and forwards signals; this process replaces itself
(``exec``) with the JVM or spark-submit.

    python3 -m hutch_spark.entrypoint driver --properties-file ... --class ... local:///app.py
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pwd
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from hutch_spark import classdata
from hutch_spark.classdata import ClassData

EXECUTOR_BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
JAVA_OPT_PREFIX = "SPARK_JAVA_OPT_"
# Environment Spark sets on executor Pods -> KubernetesExecutorBackend's flags.
EXECUTOR_FLAGS = (
    ("--driver-url", "SPARK_DRIVER_URL"),
    ("--executor-id", "SPARK_EXECUTOR_ID"),
    ("--cores", "SPARK_EXECUTOR_CORES"),
    ("--app-id", "SPARK_APPLICATION_ID"),
    ("--hostname", "SPARK_EXECUTOR_POD_IP"),
    ("--resourceProfileId", "SPARK_RESOURCE_PROFILE_ID"),
    ("--podName", "SPARK_EXECUTOR_POD_NAME"),
)
USAGE = "usage: entrypoint (driver <spark-submit args> | executor | <command> [args])"


class EntrypointError(ValueError):
    """The Pod lacks what its role needs (a Spark version mismatch, or not run by Spark)."""


def spark_home(env: Mapping[str, str]) -> str:
    """``SPARK_HOME`` if set, else the installed pyspark package (found without importing it:
    the path differs between python:3.11-slim's site-packages and Debian's dist-packages)."""
    if env.get("SPARK_HOME"):
        return env["SPARK_HOME"]
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise EntrypointError("pyspark is not installed and SPARK_HOME is unset")
    return str(Path(next(iter(spec.submodule_search_locations))))


def java_options(env: Mapping[str, str]) -> list[str]:
    """``SPARK_JAVA_OPT_0``, ``_1``, ... in numeric order (``_10`` after ``_9``)."""
    numbered = []
    for name, value in env.items():
        suffix = name.removeprefix(JAVA_OPT_PREFIX)
        if name.startswith(JAVA_OPT_PREFIX) and suffix.isdigit():
            numbered.append((int(suffix), value))
    return [value for _, value in sorted(numbered)]


def shares_classes(env: Mapping[str, str], data: ClassData | None) -> ClassData | None:
    """``data`` unless the environment puts a user's classpath in front of Spark's jars."""
    if data is None or env.get("SPARK_CLASSPATH") or env.get("SPARK_EXTRA_CLASSPATH"):
        return None
    return data


def classpath(env: Mapping[str, str], home: str, data: ClassData | None = None) -> str:
    """Spark's conf dir first (log4j2, the mounted spark.properties), then the user's
    ``SPARK_CLASSPATH``, Spark's jars, and the extra and distribution classpaths; with a
    class-data archive (``shares_classes``), its jars first and the conf dir after them."""
    conf_dir = env.get("SPARK_CONF_DIR") or f"{home}/conf"
    if data is not None:
        parts = [data.classpath, conf_dir, env.get("SPARK_DIST_CLASSPATH", "")]
    else:
        parts = [
            conf_dir,
            env.get("SPARK_CLASSPATH", ""),
            f"{home}/jars/*",
            env.get("SPARK_EXTRA_CLASSPATH", ""),
            env.get("SPARK_DIST_CLASSPATH", ""),
        ]
    return ":".join(part for part in parts if part)


def sets_driver_classpath(properties: str) -> bool:
    """Whether a spark.properties text sets ``spark.driver.extraClassPath`` (a key, not a
    value: Spark writes ``key=value`` lines, and this key has nothing to escape)."""
    for line in properties.splitlines():
        key = re.split(r"[=:\s]", line.strip(), maxsplit=1)[0]
        if key == "spark.driver.extraClassPath":
            return True
    return False


def command(
    argv: Sequence[str], env: Mapping[str, str], home: str, data: ClassData | None = None
) -> list[str]:
    """The process a role runs: a pure function of the container's args and environment, and
    of the class-data archive found in the image (``data``; for the driver, None when its
    properties set ``spark.driver.extraClassPath``)."""
    if not argv:
        raise EntrypointError(USAGE)
    role, rest = argv[0], list(argv[1:])
    if role == "driver":
        bind = env.get("SPARK_DRIVER_BIND_ADDRESS")
        if not bind:
            raise EntrypointError(
                "driver: SPARK_DRIVER_BIND_ADDRESS is not set (not run by Spark?)"
            )
        shared = [] if data is None else ["--driver-class-path", data.classpath]
        return [
            f"{home}/bin/spark-submit",
            *("--conf", f"spark.driver.bindAddress={bind}"),
            *("--deploy-mode", "client"),
            *shared,
            *rest,
        ]
    if role == "executor":
        missing = [var for _, var in EXECUTOR_FLAGS if not env.get(var)]
        missing += [] if env.get("SPARK_EXECUTOR_MEMORY") else ["SPARK_EXECUTOR_MEMORY"]
        if missing:
            raise EntrypointError(f"executor: {', '.join(missing)} not set (not run by Spark?)")
        java = f"{env['JAVA_HOME']}/bin/java" if env.get("JAVA_HOME") else "java"
        memory = env["SPARK_EXECUTOR_MEMORY"]
        flags = [item for flag, var in EXECUTOR_FLAGS for item in (flag, env[var])]
        data = shares_classes(env, data)
        return [
            java,
            *java_options(env),
            *([] if data is None else [data.java_option]),
            f"-Xms{memory}",
            f"-Xmx{memory}",
            *("-cp", classpath(env, home, data)),
            EXECUTOR_BACKEND,
            *flags,
        ]
    return [role, *rest]


def environment(
    argv: Sequence[str], env: Mapping[str, str], data: ClassData | None = None
) -> dict[str, str]:
    """The role's environment: the driver's spark-submit passes ``SPARK_SUBMIT_OPTS`` to the
    driver JVM, which is how it gets the archive without overriding the user's
    ``spark.driver.extraJavaOptions``."""
    if argv[:1] == ["driver"] and data is not None:
        return classdata.with_submit_option(env, data.java_option)
    return dict(env)


def properties_file(argv: Sequence[str]) -> str | None:
    """The ``--properties-file`` Spark passes the driver, if any."""
    for flag, value in itertools.pairwise(argv):
        if flag == "--properties-file":
            return value
    return None


def class_data_for(argv: Sequence[str], env: Mapping[str, str], home: str) -> ClassData | None:
    """The archive for this role, unless a user's classpath must stay in front of Spark's."""
    data = classdata.find(env, home)
    if data is None or argv[:1] != ["driver"]:
        return data
    path = properties_file(argv)
    try:
        text = Path(path).read_text(encoding="utf-8") if path else ""
    except OSError:
        return None  # spark-submit reports the missing file; no archive meanwhile
    return None if sets_driver_classpath(text) else data


def ensure_user_name() -> None:
    """Hadoop's login (inside Spark) needs a name for the uid. The image has one for 185; a Pod
    run as another uid gets a passwd line when /etc/passwd is writable (as Spark's images do)."""
    uid, gid = os.getuid(), os.getgid()
    try:
        pwd.getpwuid(uid)
    except KeyError:
        if os.access("/etc/passwd", os.W_OK):
            with open("/etc/passwd", "a", encoding="utf-8") as passwd:
                passwd.write(f"{uid}:x:{uid}:{gid}:anonymous uid:/tmp:/bin/false\n")
        else:
            sys.stderr.write(f"entrypoint: uid {uid} has no passwd entry; Hadoop may fail\n")


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    spark_role = args[:1] in (["driver"], ["executor"])
    try:
        home = spark_home(os.environ) if spark_role else ""
        data = class_data_for(args, os.environ, home) if spark_role else None
        cmd = command(args, os.environ, home, data)
    except EntrypointError as exc:
        sys.stderr.write(f"entrypoint: {exc}\n")
        raise SystemExit(2) from None
    env = dict(os.environ)
    if spark_role:
        ensure_user_name()
        env = environment(args, env, data)
        env["SPARK_HOME"] = home  # spark-submit, the JVM and Python workers agree on it
        shared = "with" if data is not None else "without"
        sys.stderr.write(f"entrypoint: {args[0]}: exec {cmd[0]} ({shared} class data)\n")
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)  # noqa: S606 - the role's process replaces this one


if __name__ == "__main__":
    main()
