"""spark-submit --deploy-mode cluster runs windowed_counts as real Pods, and survives losing
an executor Pod and the broker Pod mid-stream with every event counted exactly once.

Why: every Spark-on-Kubernetes path was on paper: the job ran in local mode on the host, the
image had never been built and docs/spark.md's spark-submit command had never run, and the
failure cases (issue 13, "Failure and recovery, on pods") had run only as host processes
(e2e/test_spark.py kills a local driver). Here the host's spark-submit (the pyspark wheel's)
submits the job to the node tier's apiserver; the driver Pod and two executor Pods run the
hutch-spark image (spark/jobs/Dockerfile, built by hutch_localkube.images) in containerd on
``hutch-node``; the driver consumes the operator-managed Broker's queue through its Service's
cluster DNS name as the job's own User of examples/spark-user.yaml (its Secret through
``secretKeyRef``; its Permission reads that queue and nothing else, so a Permission mistake
in the example fails this test),
and the checkpoint, the state and the Parquet output live on a PVC (a local PV the kubelet
mounts into all three Pods). The command is ``hutch_demo.sparksubmit.command``, the one
docs/spark.md shows, with smaller micro-batches so the job is mid-stream long enough.

One job run (a Spark run costs minutes of CI), three disruptions in order, each while batches
are still to come: once micro-batches have committed (the checkpoint's commit log on the PV),
an executor Pod is deleted and Spark must ask Kubernetes for a replacement; once that Pod runs,
the broker Pod ``hutch-server-0`` is deleted, the StatefulSet recreates it on the same PVC, and
the source must consume again within its documented reconnect bound (docs/spark.md); then the
job runs to its end (availableNow).

Asserted: the Pods ran on the node with ``containerd://`` IDs and the driver Succeeded; the
per-window counts read back from the PV (through the file sink's ``_spark_metadata`` log) are
exactly the unique events, duplicates and redeliveries dropped; the queue is empty with nothing
unacked; the restarted broker recovered the messages the job held unacked (none it had acked)
and every one of them was delivered again flagged redelivered and acked once.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import (
    clusters,
    launchers,
    pipeline,
    pods,
    probes,
    sparkpods,
    sparksubmit,
    waiting,
)

REPO = clusters.REPO_ROOT
EVENTS = 1800  # plus 72 duplicates and the closing tick
BATCH = 150  # messages per micro-batch: 13 batches, so the disruptions land mid-stream
QUEUE = sparkpods.JOB_QUEUE  # the one examples/spark-user.yaml's Permission lets the job read
SUBMIT_TIMEOUT = 720
# docs/spark.md, "Broker restarts: the reconnect bound": once the broker answers again the
# source consumes within 45 s (a 15 s attempt, the 30 s backoff step, the attempt that works).
RECONNECT_BOUND_S = 45.0
POLL_SLACK_S = 2.0  # this test sees it through the management API, polled every 0.5 s


@pytest.mark.k8s  # explicit: the plugin marks plane users after `-m` selection (make unit)
@pytest.mark.spark
@pytest.mark.timeout(1500)  # a cold hutch-spark build is minutes
def test_windowed_counts_pods_count_exactly_once_through_executor_and_broker_pod_loss(
    node: Any, spark_image: str, k8s_namespace: str, tmp_path: Path
) -> None:
    with sparkpods.on_node(node, k8s_namespace, tmp_path) as setup:
        _run(node, setup.cluster, k8s_namespace, spark_image, setup.volume, tmp_path)


def _run(
    node: Any, cluster: clusters.Cluster, ns: str, image: str, volume: str, work: Path
) -> None:
    endpoint = sparkpods.example_broker(cluster, ns)
    stream = pipeline.make_stream(EVENTS, prefix="k8s", expire_every=0)
    sparkpods.declare_durable(endpoint, QUEUE)
    pipeline.publish(endpoint, stream, exchange="", routing_key=QUEUE, persistent=True)
    assert stream.published == EVENTS + stream.duplicates + 1 and stream.nacked == 0

    template = work / "spark-pod-template.json"
    template.write_text(json.dumps(sparksubmit.pod_template()))
    sub = sparksubmit.Submission(
        api_server=node.server, namespace=ns, broker="hutch", queue=QUEUE, claim="spark-data",
        pod_template=template, image=image, max_messages_per_batch=BATCH,
        credentials_secret=sparkpods.job_user(cluster, ns),
    )  # fmt: skip
    cluster.apply(ns, clusters.manifest(*sparksubmit.driver_rbac(ns)))
    cluster.apply(ns, clusters.manifest(sparksubmit.claim(sub.claim, ns, volume, "1Gi")))
    pv_dir = node.node_layout.volumes_dir / volume
    commits = pv_dir / "checkpoint" / "commits"

    began = time.monotonic()
    log_path = work / "spark-submit.log"
    submit = sparkpods.start_submit(sub, sparkpods.environment(node.kubeconfig), log_path)
    try:
        chaos = _disrupt(cluster, ns, endpoint, sub, submit, commits, stream.published)
        submit.wait(timeout=max(SUBMIT_TIMEOUT - (time.monotonic() - began), 1))
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.wait()
    submitted = log_path.read_text()
    assert submit.returncode == 0, submitted[-3000:]
    seconds = time.monotonic() - began
    sys.stderr.write(f"spark-submit to driver Pod completion: {seconds:.0f}s\n")

    driver = pods.get_pod(cluster, ns, sub.driver_pod)
    assert driver is not None, submitted
    executors = pods.list_pods(cluster, ns, "spark-role=executor")
    pods.save_logs(cluster, ns, work / "pod-logs")
    ran = [pods.facts(pod) for pod in [driver, *executors]]
    sys.stderr.write(
        "".join(f"  {facts.line()}\n" for facts in ran) + _timeline(driver, executors, pv_dir)
    )
    assert driver["status"]["phase"] == "Succeeded", (driver["status"], submitted[-3000:])
    names = {p["metadata"]["name"] for p in executors}
    assert chaos.deleted_executor not in names and chaos.replacement in names, names
    assert len(executors) >= 2
    # The JVMs mapped the image's class-data archive (hutch_spark.classdata): a JVM that
    # rejects one unmaps it, so this fails if the entrypoint's classpath stopped matching.
    assert chaos.class_data and all(chaos.class_data.values()), chaos.class_data
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
    # The restarted broker's counters start at zero: it recovered what was not acked (the
    # messages the job held unacked among them, none that had been acked), delivered each
    # again flagged redelivered, and each was acked once.
    stats = queue["message_stats"]
    assert chaos.unacked_before > 0  # the restart hit while the job held messages unacked
    assert chaos.recovered > 0 and chaos.recovered + chaos.acked_before <= stream.published
    assert stats.get("redeliver", 0) > 0, stats
    assert stats.get("ack") == stats.get("redeliver") == chaos.recovered, (stats, chaos)


class _Chaos:
    """What the disruptions did, for the assertions and the summary."""

    def __init__(self) -> None:
        self.deleted_executor = ""
        self.replacement = ""
        self.recovered = 0  # messages the restarted broker read back from its PVC
        self.acked_before = 0  # acks the broker had counted just before its Pod was deleted
        self.unacked_before = 0  # messages the job held unacked then (the restart re-queues them)
        self.lines: list[str] = []
        self.class_data: dict[str, bool] = {}  # Pod -> a JVM in it maps the archive


def _disrupt(
    cluster: clusters.Cluster,
    ns: str,
    endpoint: launchers.Endpoint,
    sub: sparksubmit.Submission,
    submit: subprocess.Popen[bytes],
    commits: Path,
    published: int,
) -> _Chaos:
    """Deletes an executor Pod, waits for its replacement, then deletes the broker Pod and
    waits until the source consumes again; each step only while the job is mid-stream."""
    chaos = _Chaos()
    t0 = time.monotonic()

    def note(text: str) -> None:
        chaos.lines.append(f"+{time.monotonic() - t0:.0f}s {text}")
        sys.stderr.write(f"  {chaos.lines[-1]}\n")  # as it happens: a failure shows how far

    def running() -> None:
        assert submit.poll() is None, "spark-submit ended before the disruptions were done"

    def committed() -> int:
        running()
        return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else 0

    waiting.wait_for(committed, lambda n: n >= 2, timeout=420, interval=0.5,
                     what="two committed micro-batches")  # fmt: skip
    executors = pods.list_pods(cluster, ns, "spark-role=executor")
    original = {p["metadata"]["name"] for p in executors}
    victim = sorted(p["metadata"]["name"] for p in executors
                    if p["status"].get("phase") == "Running")[0]  # fmt: skip
    chaos.class_data = {pod: _maps_class_data(cluster, ns, pod) for pod in (sub.driver_pod, victim)}
    in_flight = _management(endpoint, f"/api/queues/%2F/{QUEUE}")
    cluster.kubectl("delete", "pod", "-n", ns, victim, "--wait=false")
    chaos.deleted_executor = victim
    note(f"deleted executor Pod {victim} after {committed()} committed batches, "
         f"{_acked(in_flight)} of {published} messages acked")  # fmt: skip
    assert committed() <= -(-published // BATCH) - 4  # batches still to come

    def replacement() -> str:
        running()
        for pod in pods.list_pods(cluster, ns, "spark-role=executor"):
            name = pod["metadata"]["name"]
            if name not in original and pod["status"].get("phase") == "Running":
                return str(name)
        return ""

    chaos.replacement = waiting.wait_for(replacement, timeout=180, interval=0.5,
                                         what="a replacement executor Pod")  # fmt: skip
    note(f"replacement executor Pod {chaos.replacement} Running")

    broker = pods.get_pod(cluster, ns, "hutch-server-0")
    assert broker is not None
    before = _management(endpoint, f"/api/queues/%2F/{QUEUE}")
    assert before["message_stats"]["publish"] == published, before["message_stats"]
    assert committed() <= -(-published // BATCH) - 3  # batches still to come
    chaos.unacked_before = int(before["messages_unacknowledged"])
    running()
    cluster.kubectl("delete", "pod", "-n", ns, "hutch-server-0", "--wait=false")
    chaos.acked_before = _acked(_management(endpoint, f"/api/queues/%2F/{QUEUE}", missing=True))
    chaos.acked_before = max(chaos.acked_before, _acked(before))
    note(
        f"deleted broker Pod hutch-server-0: {_acked(before)} acked, "
        f"{before['messages_unacknowledged']} unacked, {before['messages_ready']} ready"
    )

    pods.wait_ready(cluster, ns, "hutch-server-0", timeout=180, not_uid=broker["metadata"]["uid"])
    waiting.wait_for(lambda: probes.amqp_answers(endpoint.host, 5672), timeout=60, interval=0.2,
                     what="AMQP on the broker's ClusterIP again")  # fmt: skip
    back = time.monotonic()
    note("broker Pod Ready and answering AMQP")

    def consumers() -> int:
        running()
        listed = _management(endpoint, f"/api/queues/%2F/{QUEUE}", missing=True)
        return int(listed.get("consumers") or 0)

    waiting.wait_for(consumers, timeout=RECONNECT_BOUND_S + 30, interval=0.5,
                     what="the source consuming again")  # fmt: skip
    reconnect = time.monotonic() - back
    note(f"the source consumes again {reconnect:.1f}s after the broker answered")
    assert reconnect <= RECONNECT_BOUND_S + POLL_SLACK_S, reconnect
    chaos.recovered = _recovered(cluster, ns)
    note(f"the restarted broker recovered {chaos.recovered} messages of queue {QUEUE!r}")
    return chaos


def _maps_class_data(cluster: clusters.Cluster, ns: str, pod: str, within: float = 20.0) -> bool:
    """Whether a process in ``pod`` has the image's class-data archive mapped, asked until
    ``within`` seconds have passed. A Running executor Pod may still be in the entrypoint
    (Python, before it execs the JVM) while the other executor has committed batches; a JVM
    that refused the archive unmaps it, so waiting does not hide a refusal."""
    archive = "spark-classes.jsa"  # spark/jobs/Dockerfile's HUTCH_SPARK_CLASS_DATA
    script = f"grep -l {archive} /proc/[0-9]*/maps"
    deadline = time.monotonic() + within
    while True:
        result = cluster.kubectl("exec", "-n", ns, pod, "--", "sh", "-c", script, check=False)
        if result.returncode == 0 and "/maps" in result.stdout:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def _acked(queue: dict[str, Any]) -> int:
    return int((queue.get("message_stats") or {}).get("ack", 0))


def _recovered(cluster: clusters.Cluster, ns: str) -> int:
    """From the broker's log: ``recovered N messages in queue 'events' in vhost '/'``."""
    text = cluster.kubectl("logs", "-n", ns, "hutch-server-0").stdout
    found = re.findall(rf"recovered (\d+) messages in queue '{QUEUE}'", text)
    assert len(found) <= 1, text[-3000:]
    return int(found[0]) if found else 0  # no line: nothing recovered (asserted after counts)


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


def _management(endpoint: launchers.Endpoint, path: str, *, missing: bool = False) -> Any:
    """GET on the broker's management API; ``missing``: {} while the broker is away."""
    token = base64.b64encode(f"{endpoint.username}:{endpoint.password}".encode()).decode()
    url = f"http://{endpoint.host}:{endpoint.http_port}{urllib.parse.quote(path, safe='/%')}"
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - the bridge
            return json.loads(reply.read())
    except (urllib.error.URLError, OSError):
        if missing:
            return {}
        raise


def test_docs_show_the_spark_submit_command_this_test_runs() -> None:
    """docs/spark.md's spark-submit block is the command above, for namespace ``apps``."""
    text = (REPO / "docs" / "spark.md").read_text()
    section = text.split("### The same with spark-submit", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    words = shlex.split(block.replace("\\\n", " "))
    sub = sparksubmit.Submission(
        api_server="https://127.0.0.1:<port>", namespace="apps", broker="hutch", queue=QUEUE,
        claim="spark-data", pod_template=Path("spark-pod-template.json"),
        credentials_secret=f"{sparkpods.JOB_USER}-user-credentials",
    )  # fmt: skip
    assert words == sparksubmit.command(sub)
