"""charts/hutch-spark: rendered with helm, checked field by field, validated by a real apiserver.

The SparkApplication must take the broker's Service address and the job's own User Secret
(required: never the administrator's by default) through native Spark confs (secretKeyRef, not
the operator's webhook-dependent driver.env), keep the checkpoint on a PVC, and pin the image,
`sparkVersion` and the pyspark wheel to one release. With ``broker.tls`` it connects with
amqps:// and mounts only the CA key of a Secret through the pod templates (Spark's own secret
conf would mount the broker's tls.key too), pointing the source and sink at it.
The apiserver test applies a reduced v1beta2 CRD (tests/spark/crds/) so the rendered object
passes a real structural schema with strict field validation.
"""

import importlib.metadata
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hutch_localkube import binaries
from hutch_testing import backgroundbuild

pytestmark = pytest.mark.helm  # waits for a background build's helm (hutch_testing.backgroundbuild)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hutch-spark"
CRD = Path(__file__).with_name("crds") / "sparkapplications.sparkoperator.k8s.io.yaml"
DOCKERFILE = REPO / "spark" / "jobs" / "Dockerfile"
KUBE_VERSION = "1.36.4"


def helm() -> str:
    try:
        return str(backgroundbuild.bin_dir() / "helm")
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


USER_SECRET = "spark-windowed-counts-user-credentials"  # examples/spark-user.yaml's User
BASE = ("broker.name=orders-broker", "queue=orders", f"broker.credentialsSecret={USER_SECRET}")
TLS = ("broker.tls.enabled=true", "broker.tls.caSecret=orders-broker-tls")


@pytest.mark.broker  # runs helm template (hutch_testing.levels)
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
        == f"{USER_SECRET}:username"
    )
    assert (
        conf["spark.kubernetes.driver.secretKeyRef.HUTCH_AMQP_PASSWORD"]
        == f"{USER_SECRET}:password"
    )
    assert not any("CA_FILE" in key for key in conf)  # no TLS unless asked
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


@pytest.mark.broker  # runs helm template (hutch_testing.levels)
def test_python_workers_use_a_unix_socket_unless_the_user_says_otherwise() -> None:
    key = "spark.python.unix.domain.socket.enabled"  # hutch_spark.sessionconf.PYTHON_SOCKETS
    assert render(*BASE)["SparkApplication"]["spec"]["sparkConf"][key] == "true"
    escaped = key.replace(".", "\\.")
    mine = render(*BASE, f"sparkConf.{escaped}=false")["SparkApplication"]["spec"]["sparkConf"]
    assert mine[key] == "false"


@pytest.mark.broker  # runs helm template (hutch_testing.levels)
def test_a_users_spark_conf_wins_over_the_charts_even_when_false_or_empty() -> None:
    """sparkConf is "merged over the chart's" (values.yaml): for a key the chart sets itself,
    a user's false or empty string is a value too, not "unset" (sprig's merge kept the chart's)."""
    key = "spark.sql.streaming.stopTimeout"
    assert render(*BASE)["SparkApplication"]["spec"]["sparkConf"][key] == "30s"
    escaped = key.replace(".", "\\.")
    for given, rendered in (("false", "false"), ("0", "0"), ("90s", "90s")):
        conf = render(*BASE, f"sparkConf.{escaped}={given}")["SparkApplication"]["spec"]
        assert conf["sparkConf"][key] == rendered, given
    empty = render(*BASE, f"sparkConf.{escaped}=")
    assert empty["SparkApplication"]["spec"]["sparkConf"][key] == ""


@pytest.mark.broker  # runs helm template (hutch_testing.levels)
def test_exchange_sink_gives_executors_the_credentials() -> None:
    spec = render(*BASE, "job.sink=exchange", "job.exchange=results", "broker.vhost=prod/eu")[
        "SparkApplication"
    ]["spec"]
    conf = spec["sparkConf"]
    assert (
        conf["spark.kubernetes.executor.secretKeyRef.HUTCH_AMQP_PASSWORD"]
        == f"{USER_SECRET}:password"
    )
    assert conf["spark.executorEnv.HUTCH_AMQP_URI"].endswith(":5672/prod%2Feu")
    assert "--output" not in spec["arguments"]


@pytest.mark.broker  # runs helm template (hutch_testing.levels)
def test_spark_version_is_pinned_to_the_pyspark_wheel() -> None:
    pyspark = importlib.metadata.version("pyspark") if _has("pyspark") else "4.3.0"
    spec = render(*BASE)["SparkApplication"]["spec"]
    assert spec["sparkVersion"] == pyspark
    # The default image is the one the node tier builds and runs (hutch_localkube.images); its
    # Spark is the wheel's (the Dockerfile's pip install, below).
    assert spec["image"] == "localhost/hutch/hutch-spark:0.1.0"
    # The image installs pyspark as hutch_spark's own distribution pins it (spark/pyproject.toml),
    # as the development install's `spark` extra does (pyproject.toml).
    assert "pip install --no-cache-dir /wheels/hutch_spark-*.whl" in DOCKERFILE.read_text()
    for pyproject in (REPO / "spark" / "pyproject.toml", REPO / "pyproject.toml"):
        pinned = re.search(r'"pyspark==([^"]+)"', pyproject.read_text())
        assert pinned is not None, pyproject
        assert pinned[1] == pyspark, pyproject
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["annotations"]["hutch.dev/spark-version"] == pyspark


@pytest.mark.broker  # runs helm template (hutch_testing.levels)
def test_missing_values_fail_clearly() -> None:
    user = f"broker.credentialsSecret={USER_SECRET}"
    assert "broker.name is required" in render("queue=q", user, check=False).stderr
    assert "queue is required" in render("broker.name=b", user, check=False).stderr
    # No silent fallback to the Broker's administrator: the job's own User Secret is required.
    anonymous = render("broker.name=orders-broker", "queue=orders", check=False)
    assert anonymous.returncode != 0
    assert "broker.credentialsSecret is required" in anonymous.stderr
    assert "<user>-user-credentials" in anonymous.stderr
    assert 'read queue "orders" on vhost "/"' in anonymous.stderr
    assert "default-user" not in render(*BASE, check=True)["SparkApplication"]["spec"]["sparkConf"]
    # ... but naming it on purpose works.
    admin = render(*BASE, "broker.credentialsSecret=orders-broker-default-user")
    conf = admin["SparkApplication"]["spec"]["sparkConf"]
    assert conf["spark.kubernetes.driver.secretKeyRef.HUTCH_AMQP_PASSWORD"] == (
        "orders-broker-default-user:password"
    )
    # A Broker in another namespace: the User (and its Secret) live in the release namespace.
    crossed = render(*BASE, "broker.namespace=messaging")["SparkApplication"]["spec"]
    assert crossed["sparkConf"]["spark.kubernetes.driverEnv.HUTCH_AMQP_URI"] == (
        "amqp://orders-broker.messaging.svc.cluster.local:5672/%2F"
    )


@pytest.mark.broker  # runs helm template (hutch_testing.levels)
def test_tls_connects_with_amqps_and_mounts_only_the_ca_on_the_driver() -> None:
    spec = render(*BASE, *TLS, "broker.namespace=messaging", "broker.vhost=team-a")[
        "SparkApplication"
    ]["spec"]
    conf = spec["sparkConf"]
    # The Service name the operator verifies the broker's certificate against (<b>.<ns>.svc).
    assert conf["spark.kubernetes.driverEnv.HUTCH_AMQP_URI"] == (
        "amqps://orders-broker.messaging.svc:5671/team-a"
    )
    assert conf["spark.kubernetes.driverEnv.HUTCH_AMQP_CA_FILE"] == "/etc/hutch-ca/ca.crt"
    driver_pod = spec["driver"]["template"]["spec"]
    assert driver_pod["volumes"] == [
        {
            "name": "hutch-ca",
            "secret": {
                "secretName": "orders-broker-tls",
                "items": [{"key": "ca.crt", "path": "ca.crt"}],  # never tls.key
            },
        }
    ]
    assert driver_pod["containers"] == [
        {
            "name": "spark-kubernetes-driver",
            "volumeMounts": [{"name": "hutch-ca", "mountPath": "/etc/hutch-ca", "readOnly": True}],
        }
    ]
    assert driver_pod["securityContext"] == {"fsGroup": 185}
    # Not through Spark's secret conf (every key) nor the webhook-only operator fields.
    assert not any(".secrets." in key for key in conf)
    assert "volumes" not in spec and "volumeMounts" not in spec["driver"]
    # Parquet sink: executors never connect, so they get neither the CA nor the address.
    executor_pod = spec["executor"]["template"]["spec"]
    assert "volumes" not in executor_pod
    assert executor_pod["containers"] == [{"name": "spark-kubernetes-executor"}]
    assert not any(key.startswith("spark.executorEnv.") for key in conf)


@pytest.mark.broker  # runs helm template (hutch_testing.levels)
def test_tls_with_the_exchange_sink_gives_executors_the_ca_too() -> None:
    spec = render(
        *BASE, *TLS, "job.sink=exchange", "job.exchange=results",
        "broker.tls.caSecret=hutch-ca", "broker.tls.caKey=root.pem",
        "broker.tls.mountPath=/etc/broker-ca/",
    )["SparkApplication"]["spec"]  # fmt: skip
    conf = spec["sparkConf"]
    assert conf["spark.executorEnv.HUTCH_AMQP_URI"] == "amqps://orders-broker.apps.svc:5671/%2F"
    for key in (
        "spark.executorEnv.HUTCH_AMQP_CA_FILE",
        "spark.kubernetes.driverEnv.HUTCH_AMQP_CA_FILE",
    ):
        assert conf[key] == "/etc/broker-ca/root.pem"
    for role, container in (("driver", "spark-kubernetes-driver"),
                            ("executor", "spark-kubernetes-executor")):  # fmt: skip
        pod = spec[role]["template"]["spec"]
        assert pod["volumes"][0]["secret"] == {
            "secretName": "hutch-ca", "items": [{"key": "root.pem", "path": "root.pem"}],
        }  # fmt: skip
        (mounted,) = pod["containers"]
        assert mounted["name"] == container
        assert mounted["volumeMounts"][0]["mountPath"] == "/etc/broker-ca/"


@pytest.mark.broker  # runs helm template (hutch_testing.levels)
def test_tls_without_a_ca_secret_fails_clearly() -> None:
    missing = render(*BASE, "broker.tls.enabled=true", check=False)
    assert missing.returncode != 0
    assert "broker.tls.caSecret is required with broker.tls.enabled" in missing.stderr


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
    ] == (f"{USER_SECRET}:password")
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


@pytest.mark.k8s
def test_tls_pod_templates_are_pods_a_real_apiserver_accepts(
    apiserver: Any, k8s_namespace: str
) -> None:
    """The CRD keeps pod templates unchecked (preserve-unknown-fields), and Spark merges them
    into its Pods: so each template, given the image Spark would add, must be a valid Pod."""
    spec = render(*BASE, *TLS, "job.sink=exchange", namespace=k8s_namespace)["SparkApplication"][
        "spec"
    ]
    for role in ("driver", "executor"):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"template-{role}"},
               "spec": spec[role]["template"]["spec"]}  # fmt: skip
        pod["spec"]["containers"][0]["image"] = "localhost/hutch/hutch-spark:0.1.0"
        for broken in (False, True):
            if broken:  # a mount of a volume the template does not declare
                pod["spec"]["containers"][0]["volumeMounts"][0]["name"] = "hutch-cert"
            result = apiserver.kubectl(
                "create", "--dry-run=server", "--validate=strict", "-n", k8s_namespace,
                "-f", "-", stdin=json.dumps(pod), check=False,
            )  # fmt: skip
            assert (result.returncode != 0) == broken, result.stderr
            if broken:
                assert "hutch-cert" in result.stderr


def _has(module: str) -> bool:
    try:
        importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
