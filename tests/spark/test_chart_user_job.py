"""charts/hutch-spark with a job of the user's own: ``job.configMap`` mounts the job file in the
driver and the executors through the pod templates, ``job.arguments`` replaces windowed_counts'
arguments, and the defaults render exactly as before.

The mount is the one tests/localkube/test_spark_node.py runs on the node with
spark-submit (the same volume in Spark's pod templates, which the Spark Operator hands to
spark-submit as files); here it is checked by rendering, beside TLS's CA volume.
"""

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hutch_localkube import binaries
from hutch_testing import backgroundbuild

# Level broker: runs helm template (hutch_testing.levels), which a background build may still be
# building (hutch_testing.backgroundbuild).
pytestmark = [pytest.mark.broker, pytest.mark.helm]

CHART = Path(__file__).resolve().parents[2] / "charts" / "hutch-spark"
BASE = (
    "broker.name=hutch",
    "queue=orders-eu",
    "broker.credentialsSecret=spark-windowed-counts-user-credentials",
)
USER_JOB = (
    "job.configMap=type-counts-job",
    "job.mainApplicationFile=local:///opt/hutch/user/job.py",
    "job.arguments={--queue,orders-eu,--output,/var/lib/hutch-spark/type-counts}",
)
TLS = ("broker.tls.enabled=true", "broker.tls.caSecret=hutch-tls")
JOB_VOLUME = {"name": "hutch-user-job", "configMap": {"name": "type-counts-job"}}
JOB_MOUNT = {"name": "hutch-user-job", "mountPath": "/opt/hutch/user", "readOnly": True}


def spec(*sets: str) -> Any:
    try:
        helm = backgroundbuild.bin_dir() / "helm"
    except binaries.BinariesMissingError as error:
        if binaries.k8s_required():
            pytest.fail(f"helm is required here: {error}")
        pytest.skip(f"helm unavailable: {error}")
    command = [str(helm), "template", "jobs", str(CHART), "--namespace", "team-spark"]
    for value in sets:
        command += ["--set", value]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    (app,) = [doc for doc in docs if doc["kind"] == "SparkApplication"]
    return app["spec"]


def pod(spec: Any, role: str) -> Any:
    return spec[role]["template"]["spec"]


def test_the_job_configmap_is_mounted_in_the_driver_and_the_executors() -> None:
    rendered = spec(*BASE, *USER_JOB)
    assert rendered["mainApplicationFile"] == "local:///opt/hutch/user/job.py"
    assert rendered["arguments"] == ["--queue", "orders-eu", "--output",
                                     "/var/lib/hutch-spark/type-counts"]  # fmt: skip
    for role in ("driver", "executor"):
        template = pod(rendered, role)
        assert template["volumes"] == [JOB_VOLUME]
        assert template["containers"][0]["volumeMounts"] == [JOB_MOUNT]
        assert template["securityContext"] == {"fsGroup": 185}


def test_with_tls_the_ca_and_the_job_are_both_mounted() -> None:
    rendered = spec(*BASE, *USER_JOB, *TLS)
    driver = pod(rendered, "driver")
    assert [v["name"] for v in driver["volumes"]] == ["hutch-ca", "hutch-user-job"]
    assert driver["containers"][0]["volumeMounts"][1] == JOB_MOUNT
    executor = pod(rendered, "executor")  # the parquet sink: executors do not connect
    assert executor["volumes"] == [JOB_VOLUME]
    assert executor["containers"][0]["volumeMounts"] == [JOB_MOUNT]


def test_without_a_job_configmap_nothing_changes() -> None:
    rendered = spec(*BASE)
    assert rendered["mainApplicationFile"] == "local:///opt/hutch/jobs/windowed_counts.py"
    assert rendered["arguments"][:2] == ["--queue", "orders-eu"]
    assert "--window" in rendered["arguments"]
    for role in ("driver", "executor"):
        template = pod(rendered, role)
        assert "volumes" not in template
        assert "volumeMounts" not in template["containers"][0]
