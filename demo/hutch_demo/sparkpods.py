"""windowed_counts as a driver Pod and executor Pods, started from this host and watched.

Why: ``make run`` promised the Spark step "on Kubernetes" but ran Spark's local mode on the
host. This module runs the job the way docs/spark.md tells a user to, with the very command
``sparksubmit.command`` builds: the host's spark-submit (the pyspark wheel's) in cluster mode
against the plane's apiserver, the driver and executors as Pods of the hutch-spark image on the
real node, the Broker reached by its Service name as the job's own User (examples/spark-user.yaml:
read on its queue and nothing else, so a Permission mistake fails the job, not only the docs),
and the checkpoint, state and Parquet output on a local PV whose directory this host can read.
spark-submit waits for the driver Pod to finish, so it runs as a ``launchers.Child``: the caller
draws progress from the broker's ack count while it runs.

Only the local plane's node tier: a PV there is a directory on this machine, so the results
are read back in place. Another cluster keeps the local-mode job (quickstart's docstring).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
from hutch_localkube import binaries
from hutch_spark import classdata

from hutch_demo import (
    clusters,
    launchers,
    localnode,
    pipeline,
    pods,
    probes,
    releases,
    sparksubmit,
    submitclasses,
    waiting,
)

if TYPE_CHECKING:  # typing only: the plane package is heavy to import
    from hutch_localkube.planes import Plane

SPARK_SUBMIT = Path(sys.executable).with_name("spark-submit")  # the pyspark wheel's
EXAMPLE_BROKER = clusters.REPO_ROOT / "examples" / "broker.yaml"
EXAMPLE_USER = clusters.REPO_ROOT / "examples" / "spark-user.yaml"
JOB_USER = "spark-windowed-counts"  # its User and Permission objects
JOB_QUEUE = "orders-eu"  # what its Permission lets it read (examples/topology.yaml's queue)
# make run's job drains a few thousand events and stops: its JVMs' start is most of its time,
# and on 2 cores the C2 compiler's threads compete with three JVMs starting at once. C1 only
# (and the serial collector) cut the Spark step from 82-85 s to 65-66 s, two warm runs each.
# Not for a long-running job: C2's code is what its throughput needs (docs/spark.md's command
# and the benchmarks keep the JVM's defaults).
SHORT_JOB_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SHORT_JOB_CONFS = {
    **{f"spark.{role}.extraJavaOptions": SHORT_JOB_JVM for role in ("driver", "executor")},
    # The driver sets up the session and plans the query while its executors start, instead of
    # waiting for them (Spark waits for 80% on Kubernetes): Spark step 63-68 s -> 56-59 s.
    "spark.scheduler.minRegisteredResourcesRatio": "0",
}


def example_broker(
    cluster: clusters.Cluster, namespace: str, manifest: str | Path = EXAMPLE_BROKER
) -> launchers.Endpoint:
    """examples/broker.yaml's Broker ``hutch`` (or ``manifest``, a variant of it) as a Pod,
    reached from this host on its ClusterIP (the node's bridge) with its default-user Secret:
    the Spark node tests' broker. The tests publish and inspect as that administrator over its
    plain listeners; the job itself runs as ``job_user``."""
    cluster.apply(namespace, manifest)
    pods.wait_ready(cluster, namespace, "hutch-server-0", timeout=180)
    service = cluster.get(f"/api/v1/namespaces/{namespace}/services/hutch")
    if service is None:
        raise clusters.ClusterError(f"Broker hutch in {namespace} has no Service 'hutch'")
    host = service["spec"]["clusterIP"]
    creds = clusters.wait_for(
        lambda: clusters.secret_data(cluster, namespace, "hutch-default-user"),
        "the default-user Secret",
        timeout=60,
    )
    waiting.wait_for(lambda: probes.amqp_answers(host, 5672), timeout=60, interval=0.2,
                     what="AMQP on the broker's ClusterIP")  # fmt: skip
    return launchers.Endpoint(
        amqp_port=5672, http_port=15672, username=creds["username"],
        password=creds["password"], host=host,
    )  # fmt: skip


def job_user(cluster: clusters.Cluster, namespace: str, *, timeout: float = 90) -> str:
    """examples/spark-user.yaml applied as it is: once its Permission is Ready, the name of the
    User's Secret, which the job's Pods read through secretKeyRef (its data stays there)."""
    cluster.apply(namespace, EXAMPLE_USER)
    clusters.wait_condition(cluster, namespace, "users", JOB_USER, "Ready", timeout=timeout)
    clusters.wait_condition(cluster, namespace, "permissions", JOB_USER, "Ready", timeout=timeout)
    secret = f"{JOB_USER}-user-credentials"
    clusters.wait_for(
        lambda: cluster.get(f"/api/v1/namespaces/{namespace}/secrets/{secret}"),
        f"the User's Secret {secret}",
        timeout=timeout,
    )
    return secret


def declare_durable(endpoint: launchers.Endpoint, queue: str) -> None:
    """The job's queue, declared as an application would before publishing to it."""
    connection = pika.BlockingConnection(pika.URLParameters(endpoint.amqp_url))
    try:
        connection.channel().queue_declare(queue, durable=True)
    finally:
        connection.close()


def environment(kubeconfig: Path) -> dict[str, str]:
    """This process's environment for the host's spark-submit, minus what belongs to the host.

    spark-submit hands a set PYSPARK_PYTHON to a cluster-mode driver, which then looks for this
    venv's interpreter inside the image; a user's shell (and tests/spark/conftest.py) may set it.
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise clusters.ClusterError("pyspark is not installed (pip install -e '.[spark]')")
    host_only = {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
    return {
        **{key: value for key, value in os.environ.items() if key not in host_only},
        "KUBECONFIG": str(kubeconfig),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # The wheel's spark-submit finds Spark with `python3` from PATH, not this venv's.
        "SPARK_HOME": next(iter(spec.submodule_search_locations)),
    }


def start_submit(
    sub: sparksubmit.Submission, env: dict[str, str], log_path: Path
) -> subprocess.Popen[bytes]:
    """The host's spark-submit for ``sub``, its command line and then its output in
    ``log_path``; it follows the driver Pod until that ends. A bare child, not a
    ``launchers.Child``: the node tests that disrupt a job wait on it and kill it themselves."""
    command = sparksubmit.command(sub, str(SPARK_SUBMIT))
    log_path.write_text(" ".join(command) + "\n")
    with log_path.open("a") as out:
        return subprocess.Popen(  # noqa: S603 - our own fixed command
            command, stdout=out, stderr=subprocess.STDOUT, env=env
        )


@dataclass
class NodeSetup:
    """What ``on_node`` set up for one Spark run on the node tier."""

    cluster: clusters.Cluster
    volume: str  # a 1Gi local PV for the job's claim (checkpoint, state, output)
    operator: releases.OperatorRelease
    # Run first at the end, the last added first: what the caller installed on top (a Helm
    # release) goes while the hutch operator still runs.
    cleanups: list[Callable[[], None]] = field(default_factory=list)


@contextlib.contextmanager
def on_node(node: Plane, namespace: str, work: Path) -> Iterator[NodeSetup]:
    """The node tier ready for a Spark run: the CRDs, the Broker's volume, the job's PV and
    the hutch operator released in ``namespace``. A failure saves the namespace's Pod logs
    under ``work``; the end runs the caller's cleanups, removes the Hutch objects (while the
    operator still runs to release their finalizers) and then the operator."""
    cluster = clusters.local_cluster(node)
    node.apply_crds(clusters.REPO_ROOT / "crds")
    localnode.provide_volumes(cluster, ["2Gi"])  # the Broker's
    (volume,) = node.make_local_pvs(1, size="1Gi")
    setup = NodeSetup(cluster, volume, releases.install(cluster, namespace, work))
    try:
        yield setup
    except BaseException:
        pods.save_logs(cluster, namespace, work / "pod-logs")
        sys.stderr.write(f"pod logs: {work / 'pod-logs'}\n")
        raise
    finally:
        for cleanup in reversed(setup.cleanups):
            cleanup()
        cluster.kubectl("delete", "hutch", "--all", "-n", namespace, "--wait",
                        "--timeout=120s", check=False)  # fmt: skip
        setup.operator.uninstall()


@dataclass
class PodJob:
    """One submission: its spark-submit child and where its volume is on this machine."""

    cluster: clusters.Cluster
    submission: sparksubmit.Submission
    child: launchers.Child
    volume_dir: Path  # the PV's directory on the node's disk, mounted at sparksubmit.MOUNT
    classes: submitclasses.SubmitClasses | None = None  # the host JVM's class data

    @property
    def queue(self) -> str:
        return self.submission.queue

    @property
    def output(self) -> Path:
        return self.volume_dir / Path(self.submission.output).relative_to(sparksubmit.MOUNT)

    def committed_batches(self) -> int:
        commits = self.volume_dir / "checkpoint" / "commits"
        return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else 0

    def results(self) -> list[pipeline.WindowCount]:
        """The committed per-window counts, read from the PV through the sink's log."""
        return pipeline.read_results(self.output, root=(sparksubmit.MOUNT, self.volume_dir))

    def driver(self) -> dict[str, Any] | None:
        return pods.get_pod(self.cluster, self.submission.namespace, self.submission.driver_pod)

    def executors(self) -> list[dict[str, Any]]:
        return pods.list_pods(self.cluster, self.submission.namespace, "spark-role=executor")

    def pod_facts(self) -> list[pods.PodFacts]:
        """The driver Pod, then its executors, as the kubelet reported them."""
        driver = self.driver()
        found = ([driver] if driver is not None else []) + self.executors()
        return [pods.facts(pod) for pod in found]

    def starting(self) -> str:
        """Where the start is, before the first ack: the Pods' phases."""
        driver = self.driver()
        if driver is None:
            return "spark-submit: creating the driver Pod"
        phase = driver.get("status", {}).get("phase", "Pending")
        running = sum(
            1 for pod in self.executors() if pod.get("status", {}).get("phase") == "Running"
        )
        return f"driver Pod {phase}, {running} executor Pods running; first batch"

    def failure(self) -> str | None:
        """Why the job failed (spark-submit's exit, the driver's phase), or None if it did not."""
        code = self.child.proc.poll()
        if code is None:
            return None
        driver = self.driver()
        phase = (driver or {}).get("status", {}).get("phase")
        if code == 0 and phase == "Succeeded":
            return None
        tail = self.child.log_tail()
        return f"spark-submit exited {code}, driver Pod {phase or 'missing'}:\n{tail}"

    def finish(self) -> str | None:
        """``failure()``, once spark-submit has exited, and the host JVM's class-data recording
        settled: kept only if the job succeeded (a run that never calls this leaves it to the
        next run's ``submitclasses.prepare``, which removes it)."""
        problem = self.failure()
        if self.classes is not None and self.child.proc.poll() is not None:
            self.classes.settle(succeeded=problem is None)
        return problem


def prepare(
    plane: Any, cluster: clusters.Cluster, namespace: str, work_dir: Path, volume: str,
    size: str, **options: Any,
) -> sparksubmit.Submission:  # fmt: skip
    """What a submission needs besides its User: the Pod template (written under
    ``work_dir``), the driver's ServiceAccount and Role, and claim ``spark-data`` bound to the
    local PV ``volume``. ``options`` go to ``sparksubmit.Submission``."""
    template = work_dir / "spark-pod-template.json"
    template.parent.mkdir(parents=True, exist_ok=True)
    template.write_text(json.dumps(sparksubmit.pod_template(options.get("ca_secret"))))
    sub = sparksubmit.Submission(
        api_server=plane.server, namespace=namespace, claim="spark-data", pod_template=template,
        **options,
    )  # fmt: skip
    pvc = sparksubmit.claim(sub.claim, namespace, volume, size)
    cluster.apply(namespace, clusters.manifest(*sparksubmit.driver_rbac(namespace), pvc))
    return sub


def submit(
    plane: Any, cluster: clusters.Cluster, namespace: str, work_dir: Path, **options: Any
) -> PodJob:
    """Starts windowed_counts on the node as the example's User: that User and its Permission,
    a 1Gi local PV and its claim, the driver's ServiceAccount and Role, the Pod template, then
    spark-submit. ``options`` go to ``sparksubmit.Submission`` (broker, queue, image,
    max_messages_per_batch, ca_secret for a TLS Broker, ...)."""
    secret = job_user(cluster, namespace)
    (volume,) = plane.make_local_pvs(1, size="1Gi")
    sub = prepare(plane, cluster, namespace, work_dir, volume, "1Gi",
                  credentials_secret=secret, **options)  # fmt: skip
    command = sparksubmit.command(sub, str(SPARK_SUBMIT))
    log_path = work_dir / "logs" / "spark-submit.log"
    env = environment(plane.kubeconfig)
    classes = submitclasses.prepare(binaries.cache_root(), env["SPARK_HOME"])
    if classes is not None:
        env = classdata.with_submit_option(env, classes.java_option)
    child = launchers.spawn("spark-submit", command, log_path, env)
    return PodJob(cluster, sub, child, plane.node_layout.volumes_dir / volume, classes)
