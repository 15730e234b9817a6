"""spark-submit --deploy-mode cluster runs windowed_counts as real Pods on the node tier.

Why: every Spark-on-Kubernetes path was on paper: the job ran in local mode on the host, the
image had never been built and docs/spark.md's spark-submit command had never run. Here the
host's spark-submit (the pyspark wheel's) submits the job to the node tier's apiserver; the
driver Pod and two executor Pods run the hutch-spark image (spark/jobs/Dockerfile, built by
tests/k8s/images.py) in containerd on ``hutch-node``; the driver consumes the operator-managed
Broker's queue through its Service's cluster DNS name with the credentials of the Broker's
default-user Secret (``secretKeyRef``), and the checkpoint, the state and the Parquet output
live on a PVC (a local PV the kubelet mounts into all three Pods). The command is
``hutch_testing.sparksubmit.command``, the one docs/spark.md shows.

Asserted: the Pods ran on the node with ``containerd://`` IDs and the driver Succeeded; the
per-window counts read back from the PV (through the file sink's ``_spark_metadata`` log) are
exactly the unique events, duplicates dropped; the queue is empty with nothing unacked and the
broker counted one ack per published message.
"""

from __future__ import annotations

import base64
import datetime
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pika
import pytest
from hutch_testing import (
    clusters,
    launchers,
    localnode,
    pipeline,
    pods,
    probes,
    releases,
    sparksubmit,
    waiting,
)

REPO = clusters.REPO_ROOT
EVENTS = 1200  # plus 48 duplicates and the closing tick
QUEUE = "events"
SUBMIT_TIMEOUT = 600
SPARK_SUBMIT = Path(sys.executable).with_name("spark-submit")


@pytest.mark.k8s  # explicit: the plugin marks plane users after `-m` selection (make unit)
@pytest.mark.spark
@pytest.mark.timeout(1200)  # a cold hutch-spark build is minutes
def test_spark_submit_runs_windowed_counts_as_driver_and_executor_pods(
    node: Any, spark_image: str, k8s_namespace: str, tmp_path: Path
) -> None:
    cluster = clusters.local_cluster(node)
    node.apply_crds(REPO / "crds")
    localnode.provide_volumes(cluster, ["2Gi"])  # the Broker's
    (volume,) = node.make_local_pvs(1, size="1Gi")  # the job's: checkpoint, state, output
    operator = releases.install(cluster, k8s_namespace, tmp_path)
    try:
        _run(node, cluster, k8s_namespace, spark_image, volume, tmp_path)
    except BaseException:
        pods.save_logs(cluster, k8s_namespace, tmp_path / "pod-logs")
        sys.stderr.write(f"pod logs: {tmp_path / 'pod-logs'}\n")
        raise
    finally:
        cluster.kubectl("delete", "hutch", "--all", "-n", k8s_namespace, "--wait",
                        "--timeout=120s", check=False)  # fmt: skip
        operator.uninstall()


def _run(
    node: Any, cluster: clusters.Cluster, ns: str, image: str, volume: str, work: Path
) -> None:
    cluster.apply(ns, REPO / "examples" / "broker.yaml")
    pods.wait_ready(cluster, ns, "hutch-server-0", timeout=180)
    service = cluster.get(f"/api/v1/namespaces/{ns}/services/hutch")
    assert service is not None
    host = service["spec"]["clusterIP"]
    creds = clusters.wait_for(
        lambda: clusters.secret_data(cluster, ns, "hutch-default-user"),
        "the default-user Secret",
        timeout=60,
    )
    waiting.wait_for(lambda: probes.amqp_answers(host, 5672), timeout=60, interval=0.2,
                     what="AMQP on the broker's ClusterIP")  # fmt: skip
    endpoint = launchers.Endpoint(
        amqp_port=5672, http_port=15672, username=creds["username"],
        password=creds["password"], host=host,
    )  # fmt: skip

    stream = pipeline.make_stream(EVENTS, prefix="k8s", expire_every=0)
    _declare(endpoint)
    pipeline.publish(endpoint, stream, exchange="", routing_key=QUEUE, persistent=True)
    assert stream.published == EVENTS + stream.duplicates + 1 and stream.nacked == 0

    template = work / "spark-pod-template.json"
    template.write_text(json.dumps(sparksubmit.pod_template()))
    sub = sparksubmit.Submission(
        api_server=node.server, namespace=ns, broker="hutch", queue=QUEUE, claim="spark-data",
        pod_template=template, image=image,
    )  # fmt: skip
    cluster.apply(ns, clusters.manifest(*sparksubmit.driver_rbac(ns)))
    cluster.apply(ns, clusters.manifest(sparksubmit.claim(sub.claim, ns, volume, "1Gi")))

    began = time.monotonic()
    submitted = _spark_submit(node, sub, work / "spark-submit.log")
    seconds = time.monotonic() - began
    sys.stderr.write(f"spark-submit to driver Pod completion: {seconds:.0f}s\n")

    driver = pods.get_pod(cluster, ns, sub.driver_pod)
    assert driver is not None, submitted
    executors = pods.list_pods(cluster, ns, "spark-role=executor")
    pods.save_logs(cluster, ns, work / "pod-logs")
    pv_dir = node.node_layout.volumes_dir / volume
    ran = [pods.facts(pod) for pod in [driver, *executors]]
    sys.stderr.write(
        "".join(f"  {facts.line()}\n" for facts in ran) + _timeline(driver, executors, pv_dir)
    )
    assert driver["status"]["phase"] == "Succeeded", (driver["status"], submitted[-3000:])
    assert len(executors) >= 2
    for facts in ran:
        assert facts.node == "hutch-node", facts
        assert facts.containers and all(c.startswith("containerd://") for _, c in facts.containers)
    assert all(p["metadata"]["labels"]["spark-app-selector"] ==
               driver["metadata"]["labels"]["spark-app-selector"] for p in executors)  # fmt: skip

    rows = pipeline.read_results(pv_dir / "counts", root=(sparksubmit.MOUNT, pv_dir))
    assert rows, f"no committed Parquet files under {pv_dir / 'counts'}"
    assert pipeline.counted(rows) == stream.expected_counts()  # exactly once after dedupe
    assert sum(r.events for r in rows) == EVENTS
    assert Counter((r.window_start, r.type) for r in rows).most_common(1)[0][1] == 1

    queue = _management(endpoint, f"/api/queues/%2F/{QUEUE}")
    assert (queue["messages"], queue["messages_unacknowledged"], queue["consumers"]) == (0, 0, 0)
    stats = queue["message_stats"]
    assert stats["publish"] == stats["ack"] == stream.published, stats


def _timeline(driver: dict[str, Any], executors: list[dict[str, Any]], pv_dir: Path) -> str:
    """When the containers ran (the kubelet's times) and how many micro-batches committed."""

    def span(pod: dict[str, Any]) -> tuple[datetime.datetime, datetime.datetime | None]:
        state = (pod["status"].get("containerStatuses") or [{}])[0].get("state", {})
        done = state.get("terminated") or {}
        started = done.get("startedAt") or state.get("running", {}).get("startedAt")
        stamps = [started, done.get("finishedAt")]
        parsed = [datetime.datetime.fromisoformat(t) if t else None for t in stamps]
        assert parsed[0] is not None, pod["status"]
        return parsed[0], parsed[1]

    start, end = span(driver)
    commits = pv_dir / "checkpoint" / "commits"
    batches = sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else 0
    lines = [f"  driver container ran {((end or start) - start).total_seconds():.0f}s, "
             f"{batches} micro-batches committed\n"]  # fmt: skip
    for pod in executors:
        offset = (span(pod)[0] - start).total_seconds()
        lines.append(f"  {pod['metadata']['name']} started {offset:.0f}s after the driver\n")
    return "".join(lines)


def _declare(endpoint: launchers.Endpoint) -> None:
    params = pika.URLParameters(endpoint.amqp_url)
    connection = pika.BlockingConnection(params)
    try:
        connection.channel().queue_declare(QUEUE, durable=True)
    finally:
        connection.close()


def _spark_submit(node: Any, sub: sparksubmit.Submission, log_path: Path) -> str:
    """The host's spark-submit against the node tier's apiserver; it waits for the driver."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations, "pyspark is not installed"
    # spark-submit passes the host's PYSPARK_PYTHON to a cluster-mode driver, which then
    # looks for this venv's interpreter inside the image (tests/spark/conftest.py sets it for
    # local-mode tests in the same process; a user's shell may too).
    host_only = {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
    env = {
        **{key: value for key, value in os.environ.items() if key not in host_only},
        "KUBECONFIG": str(node.kubeconfig),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # The wheel's spark-submit looks for Spark with `python3` from PATH, not this venv's.
        "SPARK_HOME": next(iter(spec.submodule_search_locations)),
    }
    command = sparksubmit.command(sub, str(SPARK_SUBMIT))
    log_path.write_text(" ".join(command) + "\n")
    with log_path.open("a") as out:
        done = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=SUBMIT_TIMEOUT,
            check=False,
        )  # fmt: skip
    text = log_path.read_text()
    assert done.returncode == 0, text[-3000:]
    return text


def _management(endpoint: launchers.Endpoint, path: str) -> Any:
    token = base64.b64encode(f"{endpoint.username}:{endpoint.password}".encode()).decode()
    url = f"http://{endpoint.host}:{endpoint.http_port}{urllib.parse.quote(path, safe='/%')}"
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - the node's bridge
        return json.loads(reply.read())


def test_docs_show_the_spark_submit_command_this_test_runs() -> None:
    """docs/spark.md's spark-submit block is the command above, for namespace ``apps``."""
    text = (REPO / "docs" / "spark.md").read_text()
    section = text.split("### The same with spark-submit", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    words = shlex.split(block.replace("\\\n", " "))
    sub = sparksubmit.Submission(
        api_server="https://127.0.0.1:<port>", namespace="apps", broker="hutch", queue=QUEUE,
        claim="spark-data", pod_template=Path("spark-pod-template.json"),
    )  # fmt: skip
    assert words == sparksubmit.command(sub)
