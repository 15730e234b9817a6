"""windowed_counts through the Kubeflow Spark Operator: its chart, ours, and the values both take.

Why: charts/hutch-spark renders a SparkApplication, which only a Spark Operator turns into
Pods. The node test (tests/localkube/test_spark_operator_node.py) installs the operator with its own
Helm chart (charts/spark-operator-chart of the released Go module, beside the controller that
localkube/gobuild/build-spark-operator.sh builds) and our image, then ``helm install``s
charts/hutch-spark with the values below. docs/spark.md shows these same values, and a test
checks it does. Choices that matter, and why:

- the operator's mutating webhook is off: the chart needs none (native Spark confs and pod
  templates), and a webhook would need serving certificates and an apiserver that reaches it;
- the operator watches the job namespace only, and creates the driver's ServiceAccount
  ``spark-operator-spark`` there (the chart's default ``serviceAccount``);
- the job runs as a User of its own (examples/spark-user.yaml), the chart's required
  ``broker.credentialsSecret``, never as the Broker's administrator;
- the job ends (``--available-now``) and ``restartPolicy: OnFailure`` resubmits it from its
  checkpoint after a failure, as a batch-like drain should;
- Spark 4.3's spark-submit creates a NetworkPolicy per application (its driver builder's
  ``NetworkPolicyFeatureStep``, unconditional), which the operator's v2.3.0 chart does not let
  its controller do: ``controller_rbac`` grants it in the job namespace, as an administrator
  must (without it the submission fails 403 and the application ends FAILED);
- CPU *requests* are fractions (``coreRequest``) while each executor runs one task at a time,
  as in hutch_demo.sparksubmit: a 2-core node also runs the broker and both operators.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hutch_demo import clusters, pods, releases, sparkpods, sparksubmit

if TYPE_CHECKING:  # typing only: the plane package is heavy to import
    from hutch_localkube.planes import Plane

OPERATOR_RELEASE = "spark-operator"
OPERATOR_IMAGE = "localhost/hutch/hutch-spark-operator:0.1.0"
JOB_RELEASE = "windowed-counts"
MOUNT = "/var/lib/hutch-spark"  # charts/hutch-spark's checkpoint.mountPath default

# SparkApplication states in the order a run that ends well goes through them
# (sparkoperator.k8s.io/v1beta2 ApplicationStateType).
HAPPY_PATH = ("SUBMITTED", "RUNNING", "COMPLETED")
CONTROLLER_SELECTOR = (
    f"app.kubernetes.io/instance={OPERATOR_RELEASE},app.kubernetes.io/component=controller"
)
APP_PATH = "/apis/sparkoperator.k8s.io/v1beta2/namespaces/{ns}/sparkapplications/{name}"


def operator_values(job_namespace: str, image: str = OPERATOR_IMAGE) -> dict[str, Any]:
    """Values for the Spark Operator's own chart; everything else is its default."""
    registry, _, rest = image.partition("/")
    repository, _, tag = rest.rpartition(":")
    return {
        "image": {
            "registry": registry,
            "repository": repository,
            "tag": tag,
            "pullPolicy": "IfNotPresent",
        },
        "webhook": {"enable": False},
        "spark": {"jobNamespaces": [job_namespace]},
        "controller": {"uiService": {"enable": False}},
        "prometheus": {"metrics": {"enable": False}},
    }


def controller_rbac(job_namespace: str, operator_namespace: str) -> list[dict[str, Any]]:
    """A Role and RoleBinding letting the operator's controller manage the NetworkPolicy that
    Spark 4.3's spark-submit applies (server-side apply: create, get and patch)."""
    name = f"{OPERATOR_RELEASE}-controller-networkpolicies"
    meta = {"name": name, "namespace": job_namespace}
    rules = [
        {
            "apiGroups": ["networking.k8s.io"],
            "resources": ["networkpolicies"],
            "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"],
        }
    ]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": f"{OPERATOR_RELEASE}-controller",
                          "namespace": operator_namespace}],
        },
    ]  # fmt: skip


def job_values(
    broker: str,
    queue: str,
    claim: str,
    credentials_secret: str,
    *,
    executors: int = 2,
    max_messages_per_batch: int = 400,
) -> dict[str, Any]:
    """Values for charts/hutch-spark: drain ``queue`` once as the User whose Secret is
    ``credentials_secret``, resubmitted on failure."""
    return {
        "broker": {"name": broker, "credentialsSecret": credentials_secret},
        "queue": queue,
        "checkpoint": {"existingClaim": claim},
        "job": {
            "window": "1 minute",
            "maxMessagesPerBatch": max_messages_per_batch,
            "extraArguments": ["--available-now"],
        },
        "driver": {"coreRequest": "200m"},
        "executor": {"instances": executors, "coreRequest": "200m", "memory": "512m"},
        "restartPolicy": {"type": "OnFailure", "onFailureRetries": 3, "onFailureRetryInterval": 5},
        "sparkConf": {
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.kubernetes.executor.deleteOnTermination": "false",
        },
    }


def state(app: dict[str, Any] | None) -> str:
    """A SparkApplication's ``status.applicationState.state`` ("" before the first)."""
    return str(((app or {}).get("status") or {}).get("applicationState", {}).get("state", ""))


def collapse(states: list[str]) -> list[str]:
    """Observed states without repeats or the initial empty one: the transitions."""
    seen: list[str] = []
    for item in states:
        if item and (not seen or seen[-1] != item):
            seen.append(item)
    return seen


def in_order(seen: list[str], wanted: tuple[str, ...]) -> bool:
    """Whether ``wanted`` occurs in ``seen`` as a subsequence (others may come between)."""
    remaining = iter(seen)
    return all(any(item == want for item in remaining) for want in wanted)


class Helm:
    """The plane's helm in the test namespace (the hutch operator release's own runner)."""

    def __init__(self, release: releases.OperatorRelease) -> None:
        self.release = release

    def run(self, *args: str, check: bool = True) -> str:
        try:
            return self.release.helm_run(*args).stdout
        except clusters.ClusterError:
            if check:
                raise
            return ""

    def install(self, name: str, chart: Path, values: dict[str, Any], work: Path) -> None:
        values_file = work / f"{name}-values.json"
        values_file.write_text(json.dumps(values, indent=1))
        self.run("install", name, str(chart), "-f", str(values_file))

    def uninstall_both(self) -> None:
        """The job's release, then the Spark Operator's (failures ignored: a clean-up)."""
        for name in (JOB_RELEASE, OPERATOR_RELEASE):
            self.run("uninstall", name, "--wait", "--timeout=120s", check=False)


def install_operator(
    cluster: clusters.Cluster, helm: Helm, namespace: str, chart: Path, image: str, work: Path
) -> dict[str, Any]:
    """The Spark Operator's chart watching ``namespace``, its controller Pod Ready, and the
    NetworkPolicy Role its controller lacks; returns the controller Pod."""
    helm.install(OPERATOR_RELEASE, chart, operator_values(namespace, image), work)
    controller: dict[str, Any] = clusters.wait_for(
        lambda: _ready_pod(cluster, namespace, CONTROLLER_SELECTOR),
        "the Spark Operator's controller Pod Ready",
        timeout=180,
        interval=0.5,
    )
    cluster.apply(namespace, clusters.manifest(*controller_rbac(namespace, namespace)))
    return controller


@dataclass(frozen=True)
class NodeRun:
    """What ``on_node`` set up for one chart run on the node tier."""

    cluster: clusters.Cluster
    helm: Helm
    volume: str  # a 1Gi local PV for the job's claim (checkpoint, state, output)


@contextlib.contextmanager
def on_node(node: Plane, namespace: str, work: Path) -> Iterator[NodeRun]:
    """``sparkpods.on_node`` for a chart run: the same setup, and at the end both Spark
    releases go first (after a failure's Pod logs are saved), then the Hutch objects and the
    hutch operator."""
    with sparkpods.on_node(node, namespace, work) as setup:
        helm = Helm(setup.operator)
        setup.cleanups.append(helm.uninstall_both)
        yield NodeRun(setup.cluster, helm, setup.volume)


def prepare_job(
    run: NodeRun, namespace: str, chart: Path, image: str, claim: str, work: Path
) -> tuple[str, dict[str, Any]]:
    """The job's User (examples/spark-user.yaml), the Spark Operator, and ``claim`` on the run's
    PV; returns the User's Secret name and the operator's controller Pod."""
    secret = sparkpods.job_user(run.cluster, namespace)
    controller = install_operator(run.cluster, run.helm, namespace, chart, image, work)
    run.cluster.apply(
        namespace, clusters.manifest(sparksubmit.claim(claim, namespace, run.volume, "1Gi"))
    )
    return secret, controller


def _ready_pod(cluster: clusters.Cluster, ns: str, selector: str) -> dict[str, Any] | None:
    ready = [p for p in pods.list_pods(cluster, ns, selector) if pods.is_ready(p)]
    return ready[0] if ready else None
