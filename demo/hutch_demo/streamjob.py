"""The stream-queue job on the node: examples/spark-stream-copy.py as driver and executor Pods.

Why a module: ``make run`` shows the stream source's promise (docs/spark.md, "Read stream
queues") as a user meets it. The driver only plans offsets, the executors read their slices
of two stream queues on their own connections, and Spark's file sink commits each
micro-batch's Parquet in its log, so the committed output holds each message once with no
dedupe step. The pieces here (publish, the job's User, the submission, the count through the
sink's log) are what a stream run needs on any node; the quickstart's step is ``run``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
from hutch_spark import publishing

from hutch_demo import clusters, launchers, pipeline, pods, sparkpods, sparksubmit

JOB = clusters.REPO_ROOT / "examples" / "spark-stream-copy.py"
CONFIGMAP = "stream-copy-job"
STREAMS = ("orders-stream-0", "orders-stream-1")
USER = "spark-stream-copy"
APP = "stream-copy"
CHECKPOINT = f"{sparksubmit.MOUNT}/stream-copy/checkpoint"
OUTPUT = f"{sparksubmit.MOUNT}/stream-copy/output"


def publish(endpoint: launchers.Endpoint, per_stream: int, start: int = 0) -> int:
    """Both streams declared (as an application would) and filled, persistent, every message
    confirmed; message ``n`` of a stream has id ``<stream>-<n>`` and lands at offset ``n``
    of a new stream (numbers from ``start``: a stream that already holds ``start`` messages
    grows on). Returns how many were confirmed."""
    connection = pika.BlockingConnection(pika.URLParameters(endpoint.amqp_url))
    try:
        for stream in STREAMS:
            arguments = {"x-queue-type": "stream"}
            connection.channel().queue_declare(stream, durable=True, arguments=arguments)
    finally:
        connection.close()
    messages = (
        publishing.Outbound(
            "", stream, json.dumps({"n": n, "pad": "x" * 100}).encode(),
            pika.BasicProperties(delivery_mode=2, message_id=f"{stream}-{n}"),
        )
        for n in range(start, start + per_stream)
        for stream in STREAMS
    )  # fmt: skip
    publisher = publishing.ConfirmedPublisher(
        pika.URLParameters(endpoint.amqp_url), window=500, mandatory=True
    )
    return publisher.publish_all(messages)


def stream_user(cluster: clusters.Cluster, ns: str, broker: str = "hutch") -> str:
    """The job's own User: read on the two streams, tag monitoring (the driver reads the
    streams' offsets from the management API); the name of its Secret."""
    objects = [
        clusters.cr("User", USER, {"brokerRef": {"name": broker}, "tags": ["monitoring"]}),
        clusters.cr("Permission", USER, {
            "brokerRef": {"name": broker}, "vhost": "/", "user": USER,
            "configure": "", "write": "", "read": "^orders-stream-[01]$",
        }),
    ]  # fmt: skip
    cluster.apply(ns, clusters.manifest(*objects))
    for plural in ("users", "permissions"):
        clusters.wait_condition(cluster, ns, plural, USER, "Ready", timeout=90)
    secret = f"{USER}-user-credentials"
    clusters.wait_for(lambda: cluster.get(f"/api/v1/namespaces/{ns}/secrets/{secret}"),
                      f"the User's Secret {secret}", timeout=90)  # fmt: skip
    return secret


def submission(
    api_server: str, ns: str, template: Path, image: str, secret: str, app: str, *,
    broker: str = "hutch", max_offsets: int, extra_confs: dict[str, str] | None = None,
    processing_time: str | None = None,
) -> sparksubmit.Submission:  # fmt: skip
    """The job from the ConfigMap, two executors, the User's credentials on every Pod, 2
    slices per stream per batch, ``max_offsets`` offsets a batch over both streams; with
    ``processing_time`` it runs until stopped (the job's ``--processing-time``)."""
    running = ("--processing-time", processing_time) if processing_time else ()
    return sparksubmit.Submission(
        api_server=api_server, namespace=ns, broker=broker, queue=",".join(STREAMS),
        credentials_secret=secret, claim="spark-data", pod_template=template, image=image,
        app_name=app, executors=2, job_file=f"local://{sparksubmit.USER_JOB_DIR}/job.py",
        extra_confs={**sparksubmit.executor_credentials(secret), **(extra_confs or {})},
        arguments=("--streams", ",".join(STREAMS), "--checkpoint", CHECKPOINT,
                   "--output", OUTPUT, "--max-offsets-per-trigger", str(max_offsets),
                   "--num-partitions", "2", *running),
    )  # fmt: skip


def install_job(cluster: clusters.Cluster, ns: str, work: Path) -> Path:
    """The job file as ConfigMap ``stream-copy-job`` and a Pod template that mounts it; the
    template's path (written under ``work``)."""
    cluster.kubectl("create", "configmap", CONFIGMAP, "-n", ns, f"--from-file=job.py={JOB}")
    template = work / "stream-pod-template.json"
    template.parent.mkdir(parents=True, exist_ok=True)
    template.write_text(json.dumps(sparksubmit.pod_template(job_configmap=CONFIGMAP)))
    return template


@dataclass
class Output:
    """What the sink committed, read through its log on the job's volume."""

    rows: list[tuple[str, int, str]]  # (stream, offset, message_id)
    files: int

    def twice(self) -> list[tuple[str, int]]:
        return [key for key, n in Counter((s, o) for s, o, _ in self.rows).items() if n > 1]

    def exactly_once(self, per_stream: int) -> bool:
        """Each message of both streams once, at its offset, and nothing else."""
        expected = [(s, n, f"{s}-{n}") for s in STREAMS for n in range(per_stream)]
        return sorted(self.rows) == expected


def read_output(volume_dir: Path) -> Output:
    """The committed rows, through the file sink's ``_spark_metadata`` log (files a killed
    batch left behind are not in it)."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - comes with the spark extra

    output = volume_dir / Path(OUTPUT).relative_to(sparksubmit.MOUNT)
    files = pipeline.committed_files(output, root=(sparksubmit.MOUNT, volume_dir))
    rows = [
        (row["stream"], row["offset"], row["message_id"])
        for path in files
        for row in pq.read_table(path, columns=["stream", "offset", "message_id"]).to_pylist()
    ]
    return Output(rows, len(files))


def committed_batches(volume_dir: Path) -> int:
    commits = volume_dir / Path(CHECKPOINT).relative_to(sparksubmit.MOUNT) / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else 0


@dataclass
class StreamRun:
    """One run of the stream job without disruption, as the quickstart reports it."""

    published: int  # confirmed, over both streams
    per_stream: int
    output: Output
    batches: int
    seconds: float  # spark-submit's start to its exit
    pods_ran: list[pods.PodFacts] = field(default_factory=list)

    @property
    def exactly_once(self) -> bool:
        return self.output.exactly_once(self.per_stream)

    def lines(self) -> list[str]:
        verdict = "each once, no dedupe" if self.exactly_once else "MISMATCH"
        twice = self.output.twice()
        return [
            f"Spark stream job stream-copy ({' + '.join(STREAMS)}; a driver and 2 executor "
            "Pods, the executors read the streams):",
            f"  published {self.published} confirmed; committed {len(self.output.rows)} rows "
            f"in {self.output.files} Parquet files over {self.batches} micro-batches"
            f"{f', {len(twice)} offsets twice' if twice else ''}: {verdict}; "
            f"{self.seconds:.0f}s from spark-submit to the driver's end",
        ]


@dataclass
class NodeJob:
    """Where the quickstart's stream run happens: its cluster, plane and the job's volume."""

    cluster: clusters.Cluster
    plane: Any  # hutch_localkube's Plane: its apiserver, kubeconfig
    namespace: str
    broker: str
    endpoint: launchers.Endpoint  # the broker, reached from this host (administrator)
    volume_dir: Path  # the PV claim ``spark-data`` is bound to, on this machine
    work: Path


def run(
    where: NodeJob,
    image: str,
    *,
    per_stream: int,
    max_offsets: int,
    started: Callable[[launchers.Child], object] = lambda child: None,
    tick: Callable[[float, str], object] = lambda share, label: None,
    timeout: float = 900,
) -> StreamRun:
    """Publish, then the job as a driver and 2 executor Pods until it ends by itself
    (availableNow); raises ``ClusterError`` if it failed, returns what it committed."""
    cluster, ns = where.cluster, where.namespace
    published = publish(where.endpoint, per_stream)
    secret = stream_user(cluster, ns, where.broker)
    template = install_job(cluster, ns, where.work)
    sub = submission(where.plane.server, ns, template, image, secret, APP, broker=where.broker,
                     max_offsets=max_offsets, extra_confs=sparkpods.SHORT_JOB_CONFS)  # fmt: skip
    env = sparkpods.environment(where.plane.kubeconfig)
    command = sparksubmit.command(sub, str(sparkpods.SPARK_SUBMIT))
    log = where.work / "logs" / "spark-submit-stream.log"
    child = launchers.spawn("spark-submit (stream job)", command, log, env)
    started(child)
    began = time.monotonic()
    # batch 0 reads from `earliest` as resolved when it is planned, like any batch (and is
    # planned even with nothing to read: docs/spark.md, "A new query's first batch")
    total = max(1, -(-len(STREAMS) * per_stream // max_offsets))
    while child.running:
        elapsed = time.monotonic() - began
        if elapsed > timeout:
            child.stop()
            raise clusters.ClusterError(f"the stream job still ran after {timeout:.0f}s")
        done = committed_batches(where.volume_dir)
        tick(done / total * 0.99, f"{elapsed:.0f}s: {done}/{total} batches committed")
        time.sleep(1)
    seconds = time.monotonic() - began
    driver = pods.get_pod(cluster, ns, sub.driver_pod)
    phase = (driver or {}).get("status", {}).get("phase")
    if child.proc.returncode != 0 or phase != "Succeeded":
        raise clusters.ClusterError(
            f"the stream job: spark-submit exited {child.proc.returncode}, driver Pod "
            f"{phase or 'missing'}:\n{child.log_tail()}"
        )
    executors = [
        pod for pod in pods.list_pods(cluster, ns, "spark-role=executor")
        if pod["metadata"]["name"].startswith(f"{APP}-")  # spark.kubernetes.executor.podNamePrefix
    ]  # fmt: skip
    ran = [pods.facts(pod) for pod in [driver, *executors] if pod is not None]
    return StreamRun(
        published, per_stream, read_output(where.volume_dir),
        committed_batches(where.volume_dir), seconds, ran,
    )  # fmt: skip
