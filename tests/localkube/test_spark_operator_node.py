"""charts/hutch-spark through a real Kubeflow Spark Operator on the node tier, its driver
deleted half way.

Why: the chart rendered a SparkApplication that no Spark Operator had ever read. Here the
operator's controller (built from its released Go module, localkube/gobuild/build-spark-operator.sh)
runs as a Pod of our image hutch-spark-operator (docker/spark-operator.Dockerfile, FROM
hutch-spark, so its spark-submit is the jobs' Spark), installed with the operator's own Helm
chart, webhook off. ``helm install`` of charts/hutch-spark then hands it windowed_counts against
an operator-managed Broker, as the User of examples/spark-user.yaml (its Secret is the chart's
``broker.credentialsSecret``; its Permission reads the queue and nothing else), and the issue's failure case happens in the same run (one Spark
job, since each costs minutes of CI): once a micro-batch has committed, the driver Pod is
deleted; the Spark Operator resubmits it (``restartPolicy: OnFailure``), and the new driver
resumes from the checkpoint on the PVC.

Asserted: the SparkApplication went RUNNING -> (failure, resubmission) -> RUNNING -> COMPLETED
(SUBMITTED too, but it can pass between two polls), with two execution attempts and a new
driver Pod; the last driver and >= 2 executors ran on hutch-node with
``containerd://`` IDs; the per-window counts read back from the PV are exactly the unique
events (none lost, none twice, duplicates dropped); the queue is empty with nothing unacked,
one ack per published message, and the broker redelivered what the deleted driver held.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hutch_demo import (
    clusters,
    management,
    pipeline,
    pods,
    sparkoperator,
    sparkpods,
    sparksubmit,
    waiting,
)

REPO = clusters.REPO_ROOT
EVENTS = 1200  # plus 48 duplicates and the closing tick
QUEUE = sparkpods.JOB_QUEUE  # the one examples/spark-user.yaml's Permission lets the job read
CLAIM = "spark-data"
RUN_TIMEOUT = 900  # seconds from helm install to COMPLETED, the resubmission included


@pytest.mark.k8s  # explicit: the plugin marks plane users after `-m` selection (make unit)
@pytest.mark.spark
@pytest.mark.timeout(1800)  # cold: the controller's Go build and two image builds
def test_spark_operator_runs_the_chart_and_resubmits_a_deleted_driver(
    node: Any, spark_operator: Any, k8s_namespace: str, tmp_path: Path
) -> None:
    with sparkoperator.on_node(node, k8s_namespace, tmp_path) as run:
        _run(node, run, spark_operator, k8s_namespace, tmp_path)


def _run(node: Any, run: sparkoperator.NodeRun, build: Any, ns: str, work: Path) -> None:
    cluster, helm = run.cluster, run.helm
    endpoint = sparkpods.example_broker(cluster, ns)
    stream = pipeline.make_stream(EVENTS, prefix="op", expire_every=0)
    sparkpods.declare_durable(endpoint, QUEUE)
    pipeline.publish(endpoint, stream, exchange="", routing_key=QUEUE, persistent=True)
    assert stream.published == EVENTS + stream.duplicates + 1 and stream.nacked == 0
    secret, controller = sparkoperator.prepare_job(run, ns, build.chart, build.image, CLAIM, work)
    assert controller["spec"]["containers"][0]["image"] == build.image

    began = time.monotonic()
    helm.install(
        sparkoperator.JOB_RELEASE, REPO / "charts" / "hutch-spark",
        sparkoperator.job_values("hutch", QUEUE, CLAIM, secret), work,
    )  # fmt: skip
    pv_dir = node.node_layout.volumes_dir / run.volume
    watched = _watch(cluster, ns, pv_dir)
    seconds = time.monotonic() - began
    sys.stderr.write(
        f"helm install to COMPLETED: {seconds:.0f}s; states {watched.states}; driver deleted "
        f"{watched.deleted_at:.0f}s in, after {watched.batches_before} committed batches\n"
    )
    app = watched.app
    assert sparkoperator.state(app) == "COMPLETED", (watched.states, app.get("status"))
    # The happy path, then the deleted driver's failure and a second submission that completes.
    # SUBMITTED can pass within one 0.5 s poll (CI saw RUNNING first), so it is not required;
    # the second submission shows in executionAttempts and in a new driver Pod (below).
    assert "RUNNING" in watched.states, watched.states
    after = watched.states[watched.states.index("RUNNING") + 1 :]
    assert set(after) & {"FAILING", "PENDING_RERUN", "FAILED_SUBMISSION"}, watched.states
    assert sparkoperator.in_order(after, ("RUNNING", "COMPLETED")), watched.states
    assert app["status"]["executionAttempts"] >= 2, app["status"]  # submissionAttempts resets

    driver_name = app["status"]["driverInfo"]["podName"]
    # COMPLETED follows the driver container's exit; the Pod's phase can trail it by seconds.
    driver = waiting.wait_for(
        lambda: pods.get_pod(cluster, ns, driver_name),
        lambda pod: pod is None or pod["status"].get("phase") in ("Succeeded", "Failed"),
        timeout=60, interval=0.5, what="the driver Pod's final phase",
    )  # fmt: skip
    assert driver is not None
    assert driver["metadata"]["uid"] != watched.deleted_uid  # a new Pod, not the deleted one
    selector = driver["metadata"]["labels"]["spark-app-selector"]
    executors = pods.list_pods(cluster, ns, f"spark-role=executor,spark-app-selector={selector}")
    ran = [pods.facts(pod) for pod in [driver, *executors]]
    sys.stderr.write("".join(f"  {facts.line()}\n" for facts in ran))
    assert driver["status"]["phase"] == "Succeeded", driver["status"]
    assert driver["spec"]["securityContext"].get("fsGroup") == sparksubmit.SPARK_UID  # template
    assert len(executors) >= 2
    for facts in ran:
        assert facts.node == "hutch-node", facts
        assert facts.containers and all(c.startswith("containerd://") for _, c in facts.containers)

    rows = pipeline.read_results(pv_dir / "output", root=(sparkoperator.MOUNT, pv_dir))
    assert rows, f"no committed Parquet files under {pv_dir / 'output'}"
    assert pipeline.counted(rows) == stream.expected_counts()  # exactly once after dedupe
    assert sum(r.events for r in rows) == EVENTS
    assert Counter((r.window_start, r.type) for r in rows).most_common(1)[0][1] == 1

    queue = management.Management(endpoint).queue(QUEUE)
    assert (queue["messages"], queue["messages_unacknowledged"], queue["consumers"]) == (0, 0, 0)
    stats = queue["message_stats"]
    assert stats["publish"] == stats["ack"] == stream.published, stats
    assert stats.get("redeliver", 0) > 0, stats  # the deleted driver's unacked batch came back
    _assert_consumed_as_the_job_user(cluster, ns, driver_name)


def _assert_consumed_as_the_job_user(cluster: clusters.Cluster, ns: str, driver: str) -> None:
    """The driver read the User's Secret, not the administrator's (the conf names it)."""
    pod = pods.get_pod(cluster, ns, driver)
    assert pod is not None
    refs = {
        env["name"]: env["valueFrom"]["secretKeyRef"]["name"]
        for container in pod["spec"]["containers"]
        for env in container.get("env", [])
        if env.get("valueFrom", {}).get("secretKeyRef")
    }
    secret = f"{sparkpods.JOB_USER}-user-credentials"
    assert refs.get("HUTCH_AMQP_USERNAME") == refs.get("HUTCH_AMQP_PASSWORD") == secret, refs


class Run:
    """What the test saw of the SparkApplication while it ran."""

    def __init__(self) -> None:
        self.states: list[str] = []
        self.app: dict[str, Any] = {}
        self.deleted_uid = ""
        self.deleted_at = 0.0
        self.batches_before = 0


def _watch(cluster: clusters.Cluster, ns: str, pv_dir: Path) -> Run:
    """Polls the app's state until it ends; deletes the driver Pod once a batch committed."""
    path = sparkoperator.APP_PATH.format(ns=ns, name=sparkoperator.JOB_RELEASE)
    run, seen = Run(), []
    began = time.monotonic()
    while time.monotonic() - began < RUN_TIMEOUT:
        app = cluster.get(path) or {}
        seen.append(sparkoperator.state(app))
        run.app, run.states = app, sparkoperator.collapse(seen)
        if seen[-1] in ("COMPLETED", "FAILED"):
            return run
        batches = _committed_batches(pv_dir)
        if not run.deleted_uid and seen[-1] == "RUNNING" and batches >= 1:
            driver = pods.get_pod(cluster, ns, app["status"]["driverInfo"]["podName"])
            assert driver is not None
            run.deleted_uid = driver["metadata"]["uid"]
            run.deleted_at, run.batches_before = time.monotonic() - began, batches
            cluster.kubectl("delete", "pod", "-n", ns, driver["metadata"]["name"], "--wait=false")
        time.sleep(0.5)
    raise AssertionError(f"not finished after {RUN_TIMEOUT}s: {run.states}")


def _committed_batches(pv_dir: Path) -> int:
    commits = pv_dir / "checkpoint" / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else 0


def test_docs_show_the_values_this_test_installs() -> None:
    """docs/spark.md's two values files are ``operator_values`` and ``job_values`` above."""
    text = (REPO / "docs" / "spark.md").read_text()
    section = text.split("### The chart `charts/hutch-spark`", 1)[1].split("\n### ", 1)[0]
    blocks = [chunk.split("```", 1)[0] for chunk in section.split("```yaml\n")[1:]]
    operator_block, job_block = (yaml.safe_load(block) for block in blocks)
    assert operator_block == sparkoperator.operator_values("<ns>")
    assert job_block == sparkoperator.job_values(
        "hutch", QUEUE, CLAIM, f"{sparkpods.JOB_USER}-user-credentials"
    )
    role, binding = sparkoperator.controller_rbac("<ns>", "<ns>")
    verbs = ",".join(role["rules"][0]["verbs"])
    assert f"create role {role['metadata']['name']} -n <ns> \\\n  --verb={verbs} " in section
    account = binding["subjects"][0]
    assert f"--serviceaccount=<ns>:{account['name']}\n" in section
