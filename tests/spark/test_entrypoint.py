"""The hutch-spark image's entrypoint (hutch_spark.entrypoint), without a container or Spark.

Why: Spark on Kubernetes starts its driver and executor Pods with a role as the container's
args and the rest in environment variables; a wrong flag or a missing variable shows only as a
Pod that dies at start. These pin the translation; the node test (tests/localkube/test_spark_node.py)
runs it for real.
"""

from __future__ import annotations

import pytest
from hutch_spark import classdata, entrypoint
from hutch_spark.classdata import ClassData

HOME = "/usr/lib/python3/dist-packages/pyspark"
EXECUTOR_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@driver-svc.ns.svc:7078",
    "SPARK_EXECUTOR_ID": "2",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_APPLICATION_ID": "spark-app-1",
    "SPARK_EXECUTOR_POD_IP": "10.246.0.9",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "job-exec-2",
    "SPARK_EXECUTOR_MEMORY": "512m",
    "SPARK_CONF_DIR": "/opt/spark/conf",
    "SPARK_JAVA_OPT_10": "-Dten",
    "SPARK_JAVA_OPT_0": "-Dzero",
    "SPARK_JAVA_OPT_9": "-Dnine",
}


def test_driver_runs_spark_submit_in_client_mode_bound_to_the_pod_address():
    argv = ["driver", "--properties-file", "/opt/spark/conf/spark.properties", "--class",
            "org.apache.spark.deploy.PythonRunner", "local:///opt/hutch/jobs/job.py", "--x", "1"]  # fmt: skip
    cmd = entrypoint.command(argv, {"SPARK_DRIVER_BIND_ADDRESS": "10.246.0.7"}, HOME)
    assert cmd == [
        f"{HOME}/bin/spark-submit",
        "--conf",
        "spark.driver.bindAddress=10.246.0.7",
        "--deploy-mode",
        "client",
        *argv[1:],
    ]


def test_executor_runs_the_kubernetes_backend_from_the_pod_environment():
    cmd = entrypoint.command(["executor"], EXECUTOR_ENV, HOME)
    backend = cmd.index(entrypoint.EXECUTOR_BACKEND)
    assert cmd[:6] == ["java", "-Dzero", "-Dnine", "-Dten", "-Xms512m", "-Xmx512m"]
    assert cmd[6:backend] == ["-cp", f"/opt/spark/conf:{HOME}/jars/*"]
    flags = dict(zip(cmd[backend + 1 :: 2], cmd[backend + 2 :: 2], strict=True))
    assert flags == {
        "--driver-url": "spark://CoarseGrainedScheduler@driver-svc.ns.svc:7078",
        "--executor-id": "2",
        "--cores": "1",
        "--app-id": "spark-app-1",
        "--hostname": "10.246.0.9",
        "--resourceProfileId": "0",
        "--podName": "job-exec-2",
    }


def test_executor_classpath_and_java_follow_the_environment():
    env = {**EXECUTOR_ENV, "JAVA_HOME": "/opt/java", "SPARK_CLASSPATH": "/extra/a.jar"}
    del env["SPARK_CONF_DIR"]
    cmd = entrypoint.command(["executor"], env, HOME)
    assert cmd[0] == "/opt/java/bin/java"
    assert cmd[cmd.index("-cp") + 1] == f"{HOME}/conf:/extra/a.jar:{HOME}/jars/*"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["driver", "x"], {}, "SPARK_DRIVER_BIND_ADDRESS"),
        (["executor"], {k: v for k, v in EXECUTOR_ENV.items() if k != "SPARK_DRIVER_URL"},
         "SPARK_DRIVER_URL"),
        (["executor"], {k: v for k, v in EXECUTOR_ENV.items() if k != "SPARK_EXECUTOR_MEMORY"},
         "SPARK_EXECUTOR_MEMORY"),
        ([], {}, "usage"),
    ],
)  # fmt: skip
def test_a_role_without_what_spark_gives_it_fails_with_the_missing_name(argv, env, message):
    with pytest.raises(entrypoint.EntrypointError, match=message):
        entrypoint.command(argv, env, HOME)


def test_anything_else_runs_as_given():
    assert entrypoint.command(["python3", "-c", "print(1)"], {}, HOME) == [
        "python3",
        "-c",
        "print(1)",
    ]


def test_spark_home_is_the_installed_pyspark_unless_set():
    assert entrypoint.spark_home({"SPARK_HOME": "/opt/spark"}) == "/opt/spark"
    found = entrypoint.spark_home({})
    assert found.endswith("/pyspark")


DATA = ClassData("/opt/hutch/spark-classes.jsa", (f"{HOME}/jars/a.jar", f"{HOME}/jars/b.jar"))


def test_with_class_data_the_executor_maps_it_and_its_classpath_leads_with_the_jars():
    cmd = entrypoint.command(["executor"], EXECUTOR_ENV, HOME, DATA)
    assert "-XX:SharedArchiveFile=/opt/hutch/spark-classes.jsa" in cmd[: cmd.index("-cp")]
    assert cmd[cmd.index("-cp") + 1] == f"{HOME}/jars/a.jar:{HOME}/jars/b.jar:/opt/spark/conf"


def test_a_users_executor_classpath_keeps_its_place_and_the_archive_is_not_used():
    env = {**EXECUTOR_ENV, "SPARK_CLASSPATH": "/extra/a.jar"}
    cmd = entrypoint.command(["executor"], env, HOME, DATA)
    assert not any(part.startswith("-XX:SharedArchiveFile") for part in cmd)
    assert cmd[cmd.index("-cp") + 1] == f"/opt/spark/conf:/extra/a.jar:{HOME}/jars/*"


def test_with_class_data_the_driver_gets_the_jars_first_and_the_archive_by_submit_opts():
    argv = ["driver", "--properties-file", "/opt/spark/conf/spark.properties", "app.py"]
    env = {"SPARK_DRIVER_BIND_ADDRESS": "10.246.0.7", "SPARK_SUBMIT_OPTS": "-Dmine=1"}
    cmd = entrypoint.command(argv, env, HOME, DATA)
    assert cmd[cmd.index("--driver-class-path") + 1] == DATA.classpath
    assert cmd[-3:] == argv[1:]
    changed = entrypoint.environment(argv, env, DATA)
    assert (
        changed["SPARK_SUBMIT_OPTS"]
        == "-Dmine=1 -XX:SharedArchiveFile=/opt/hutch/spark-classes.jsa"
    )
    assert entrypoint.environment(argv, env, None) == env
    assert "--driver-class-path" not in entrypoint.command(argv, env, HOME, None)


@pytest.mark.parametrize(
    ("text", "sets"),
    [
        ("spark.driver.extraClassPath=/extra/a.jar\n", True),
        ("  spark.driver.extraClassPath : /extra/a.jar\n", True),
        ("spark.driver.extraClassPath /extra/a.jar\n", True),
        ("spark.driver.extraJavaOptions=-Dspark.driver.extraClassPath=x\n", False),
        ("spark.executor.extraClassPath=/extra/a.jar\n", False),
        ("", False),
    ],
)
def test_a_driver_classpath_in_the_properties_is_seen(text, sets):
    assert entrypoint.sets_driver_classpath(text) is sets


def test_the_driver_uses_no_archive_when_its_properties_set_a_classpath(tmp_path):
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "a.jar").write_bytes(b"PK")
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"jsa")
    classdata.recorded(str(archive)).write_text(f"{home}/jars/a.jar")
    env = {classdata.ENV: str(archive)}
    props = tmp_path / "spark.properties"
    props.write_text("spark.app.name=x\n")
    argv = ["driver", "--properties-file", str(props), "app.py"]
    assert entrypoint.class_data_for(argv, env, str(home)) is not None
    assert entrypoint.class_data_for(["executor"], env, str(home)) is not None
    props.write_text("spark.driver.extraClassPath=/extra/a.jar\n")
    assert entrypoint.class_data_for(argv, env, str(home)) is None
    assert entrypoint.class_data_for(["executor"], env, str(home)) is not None
