"""charts/hutch-spark: rendered with helm, checked field by field, validated by a real apiserver.

The SparkApplication must take the broker's Service address and its credentials Secret through
native Spark confs (secretKeyRef, not the operator's webhook-dependent driver.env), keep the
checkpoint on a PVC, and pin the image, `sparkVersion` and the pyspark wheel to one release.
The apiserver test applies a reduced v1beta2 CRD (tests/spark/crds/) so the rendered object
passes a real structural schema with strict field validation.
"""

import importlib.metadata
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hutch_testing.plane import binaries

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hutch-spark"
CRD = Path(__file__).with_name("crds") / "sparkapplications.sparkoperator.k8s.io.yaml"
DOCKERFILE = REPO / "spark" / "jobs" / "Dockerfile"
KUBE_VERSION = "1.36.4"


def helm() -> str:
    try:
        return str(binaries.find_bin_dir() / "helm")
    except binaries.BinariesMissingError as error:
        if binaries.k8s_required():
            pytest.fail(f"helm is required here: {error}")
        pytest.skip(f"helm unavailable: {error}")


def render(*sets: str, namespace: str = "apps", check: bool = True) -> Any:
    command = [
        helm(),
        "template",
        "orders",
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
    ]
    for value in sets:
        command += ["--set", value]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if not check:
        return result
    assert result.returncode == 0, result.stderr
    return {doc["kind"]: doc for doc in yaml.safe_load_all(result.stdout) if doc}


BASE = ("broker.name=orders-broker", "queue=orders")


def test_sparkapplication_wires_broker_secret_and_checkpoint() -> None:
    app = render(*BASE)["SparkApplication"]
    spec = app["spec"]
    conf = spec["sparkConf"]
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert (spec["type"], spec["mode"]) == ("Python", "cluster")
    assert spec["mainApplicationFile"] == "local:///opt/hutch/jobs/windowed_counts.py"
    assert conf["spark.kubernetes.driverEnv.HUTCH_AMQP_URI"] == (
        "amqp://orders-broker.apps.svc.cluster.local:5672/%2F"
    )
    assert (
        conf["spark.kubernetes.driver.secretKeyRef.HUTCH_AMQP_USERNAME"]
        == "orders-broker-default-user:username"
    )
    assert (
        conf["spark.kubernetes.driver.secretKeyRef.HUTCH_AMQP_PASSWORD"]
        == "orders-broker-default-user:password"
    )
    for role in ("driver", "executor"):  # a stateful query writes state from executors too
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.checkpoint"
        assert conf[f"{prefix}.options.claimName"] == "orders-checkpoint"
        assert conf[f"{prefix}.mount.path"] == "/var/lib/hutch-spark"
    arguments = spec["arguments"]
    assert arguments[arguments.index("--checkpoint") + 1] == "/var/lib/hutch-spark/checkpoint"
    assert arguments[arguments.index("--queue") + 1] == "orders"
    assert "env" not in spec["driver"] and "envFrom" not in spec["driver"]
    assert "volumes" not in spec
    assert not any("secretKeyRef" in key and "executor" in key for key in conf)  # parquet sink
    assert spec["restartPolicy"]["type"] == "Always"
    assert spec["driver"]["serviceAccount"] == "spark-operator-spark"
    # Pod settings through the pod templates Spark applies, not webhook-only operator fields.
    assert "terminationGracePeriodSeconds" not in spec["driver"]
    driver_pod = spec["driver"]["template"]["spec"]
    assert driver_pod["terminationGracePeriodSeconds"] == 60
    assert driver_pod["securityContext"] == {"fsGroup": 185}
    assert spec["executor"]["template"]["spec"]["securityContext"] == {"fsGroup": 185}
    # Named as the operator's podTemplateContainerName: Spark 4.3 fails on a template without.
    assert driver_pod["containers"] == [{"name": "spark-kubernetes-driver"}]
    executor_pod = spec["executor"]["template"]["spec"]
    assert executor_pod["containers"] == [{"name": "spark-kubernetes-executor"}]


def test_exchange_sink_gives_executors_the_credentials() -> None:
    spec = render(*BASE, "job.sink=exchange", "job.exchange=results", "broker.vhost=prod/eu")[
        "SparkApplication"
    ]["spec"]
    conf = spec["sparkConf"]
    assert (
        conf["spark.kubernetes.executor.secretKeyRef.HUTCH_AMQP_PASSWORD"]
        == "orders-broker-default-user:password"
    )
    assert conf["spark.executorEnv.HUTCH_AMQP_URI"].endswith(":5672/prod%2Feu")
    assert "--output" not in spec["arguments"]


def test_spark_version_is_pinned_to_the_pyspark_wheel() -> None:
    pyspark = importlib.metadata.version("pyspark") if _has("pyspark") else "4.3.0"
    spec = render(*BASE)["SparkApplication"]["spec"]
    assert spec["sparkVersion"] == pyspark
    # The default image is the one the node tier builds and runs (hutch_testing.plane.images); its
    # Spark is the wheel's (the Dockerfile's pip install, below).
    assert spec["image"] == "localhost/hutch/hutch-spark:0.1.0"
    # The image installs pyspark from the hutch wheel's `spark` extra: pyproject's pin.
    assert '"$(echo /wheels/hutch-*.whl)[spark]"' in DOCKERFILE.read_text()
    pinned = re.search(r'"pyspark==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert pinned is not None
    assert pinned[1] == pyspark
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["annotations"]["hutch.dev/spark-version"] == pyspark


def test_missing_values_and_cross_namespace_secrets_fail_clearly() -> None:
    assert "broker.name is required" in render("queue=q", check=False).stderr
    assert "queue is required" in render("broker.name=b", check=False).stderr
    crossed = render(*BASE, "broker.namespace=brokers", check=False)
    assert crossed.returncode != 0
    assert "copy orders-broker-default-user into apps" in crossed.stderr


@pytest.mark.k8s
def test_rendered_manifests_pass_a_real_apiserver(apiserver: Any, k8s_namespace: str) -> None:
    apiserver.apply_crds(CRD)
    rendered = subprocess.run(
        [
            helm(),
            "template",
            "orders",
            str(CHART),
            "--namespace",
            k8s_namespace,
            "--kube-version",
            KUBE_VERSION,
            *[f"--set={v}" for v in BASE],
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    apiserver.kubectl(
        "apply",
        "--server-side",
        "--validate=strict",
        "-n",
        k8s_namespace,
        "-f",
        "-",
        stdin=rendered,
    )
    stored = apiserver.kubectl(
        "get", "sparkapplication", "orders", "-n", k8s_namespace, "-o", "yaml"
    ).stdout
    assert yaml.safe_load(stored)["spec"]["sparkConf"][
        "spark.kubernetes.driver.secretKeyRef.HUTCH_AMQP_PASSWORD"
    ] == ("orders-broker-default-user:password")
    # The schema is really enforced: an unknown field and a bad enum value are refused.
    for broken, complaint in (
        (rendered.replace("memoryOverhead:", "memoryOverheads:"), "memoryOverheads"),
        (rendered.replace("mode: cluster", "mode: local"), "spec.mode"),
    ):
        refused = apiserver.kubectl(
            "apply",
            "--server-side",
            "--validate=strict",
            "-n",
            k8s_namespace,
            "-f",
            "-",
            stdin=broken,
            check=False,
        )
        assert refused.returncode != 0
        assert complaint in refused.stderr


def _has(module: str) -> bool:
    try:
        importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
