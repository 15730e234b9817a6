"""The main job in one command: the whole Hutch chain in real containers, summarised.

Why: a newcomer should see the real thing work (CRDs, the operator installed with Helm, a
Broker, the broker Pod it runs, topology from the examples, events, the Spark job) in one
command and one screen, and the e2e suite should drive that very chain rather than a copy of
it. So the chain's steps are the methods of ``chain.Chain``; ``run()`` here strings them
together with a progress reporter and returns a ``summaries.Summary``; ``e2e/conftest.py``
calls the same steps.

    python -m hutch_demo.quickstart [--keep] [--events N] [--kubeconfig PATH] [--tls]

By default it starts the local plane's ``node`` tier (a real kubelet, containerd and CNI
bridge; docs/real-node.md) after building the images from ``docker/*.Dockerfile`` and
``spark/jobs/Dockerfile`` without Docker (cached). The operator runs as the chart's Pod, the
Broker as its StatefulSet's Pod; publishers on this host reach the broker through ``kubectl
port-forward`` on loopback. The Spark job runs as docs/spark.md shows: spark-submit in cluster
mode, a driver Pod and two executor Pods reading the queue through the Broker's Service as the
job's own User (examples/spark-user.yaml, not the administrator), the output on a PV
(``sparkpods``). The hutch-spark image (~1 GB) is imported into the node's
containerd in the background while the operator and the Broker start. A stream job
follows (``streamjob``; ``--no-stream-job`` leaves it out: examples/spark-stream-copy.py over two
stream queues, a driver Pod and two executor Pods that read the streams): it copies every
message to Parquet, and the summary counts the committed rows, each message once, no dedupe.

With ``--kubeconfig`` the same runs on another cluster (kind, with the images loaded by ``kind
load``), except the Spark job, which runs in Spark's local mode on this host there: its output
must be readable here, and only the local node's PVs are directories on this machine. Every
host process the chain starts is stopped by its PID at the end, also on Ctrl-C, SIGTERM or a
failed step; ``--keep`` leaves it all running until Ctrl-C.

``--tls`` applies examples/broker-tls.yaml instead: a CA and a server certificate made here for
the Broker's Service names go into the Secrets it names, and the Broker serves AMQPS and HTTPS
only. The clients follow the applied Broker's ``spec.tls`` (``clienttls``), not the flag: the
publisher and checks here connect with amqps/https verifying that CA, the Spark Pods get its
``ca.crt`` mounted and an amqps:// address, and the summary says which connections were TLS.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from hutch_localkube import binaries, planes

from hutch_demo import (
    certs,
    chain,
    clienttls,
    clusters,
    imagebuild,
    keeping,
    launchers,
    management,
    pipeline,
    processes,
    progress,
    releases,
    sparkpods,
    streamjob,
    summaries,
)

EVENTS_EXCHANGE = "orders"  # examples/topology.yaml: topic exchange, "eu.#" -> orders-eu
EVENTS_QUEUE = sparkpods.JOB_QUEUE  # orders-eu: what examples/spark-user.yaml lets the job read
TLS_BROKER = chain.EXAMPLES / "broker-tls.yaml"
TLS_SECRET = "hutch-tls"  # noqa: S105 - a Secret name: broker-tls.yaml spec.tls.secretName
CA_SECRET = "hutch-ca"  # noqa: S105 - its caSecretName: ca.crt only, what clients trust


# --- the whole run ------------------------------------------------------------------------------


@dataclass
class Options:
    keep: bool = False
    events: int = 3000
    kubeconfig: Path | None = None
    namespace: str = "quickstart"
    work_dir: Path | None = None
    spark_pods: bool = True  # False: Spark's local mode on this host (always so on --kubeconfig)
    tls: bool = False  # examples/broker-tls.yaml with a CA and certificate made here
    stream_job: bool = True  # the stream job (streamjob) after windowed_counts, when Pods run it


STEP_COUNT = 12  # and the stream job's step when Spark runs as Pods (not with --tls)
STREAM_PER_STREAM = 5000  # messages in each of the two stream queues
STREAM_MAX_OFFSETS = 2500  # a micro-batch's offsets over both: 4 batches
TIER = "node"
JOB_TIMEOUT = 900  # seconds


def run(keep: bool = False, **kwargs: Any) -> summaries.Summary:
    """Runs the chain end to end and returns its summary (``keep``: wait for Ctrl-C first).

    On a failed step the work directory (logs, rendered config, job output) is kept and named.
    """
    options = Options(keep=keep, **kwargs)
    streams = options.stream_job and options.spark_pods and options.kubeconfig is None
    streams = streams and not options.tls
    report = progress.Progress(total=STEP_COUNT + streams)
    work_dir = options.work_dir or Path(tempfile.mkdtemp(prefix="hutch-quickstart-"))
    previous = _exit_on_signals()
    try:
        with contextlib.ExitStack() as stack:
            cluster = _cluster(report, options, work_dir, stack)
            _exit_on_signals()  # again: the plane's registry put its own handler first
            spark_image = _import_spark_image(cluster, stack) if options.spark_pods else None
            line = chain.Chain(cluster, options.namespace, work_dir)
            stack.callback(line.stop)
            try:
                summary = _drive(report, line, options, spark_image)
            except Exception:
                if cluster.plane is not None:
                    cluster.plane.failed = True  # the plane copies its logs to test-artifacts/
                with contextlib.suppress(Exception):
                    line.save_logs()  # the Pods' logs go with the plane: keep them
                raise
            if not options.keep:
                summary.parquet = ""  # the work dir goes at exit
            _out(summary.render())
            if options.keep:
                _out(summaries.connection_help(line, summary, _save_ca(line, work_dir)))
                _out(keep_help(line, options))
                try:
                    _wait_for_interrupt(line, report)
                finally:  # Ctrl-C or SIGTERM: say what goes before it goes
                    report.say(_removing(cluster, work_dir))
    except Exception:
        report.say(f"logs kept in {work_dir}")
        raise
    except BaseException:  # Ctrl-C, SIGTERM: stopped on purpose, nothing worth keeping
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    shutil.rmtree(work_dir, ignore_errors=True)
    return summary


def _cluster(
    report: progress.Progress, options: Options, work_dir: Path, stack: contextlib.ExitStack
) -> clusters.Cluster:
    with report.step("Checking prerequisites (Java, pyspark, pyarrow)", "prerequisites"):
        problems = summaries.prerequisite_problems()
        if problems:
            raise SystemExit("quickstart cannot run:\n  " + "\n  ".join(problems))
    if options.kubeconfig is not None:
        with report.step(f"Kubernetes binaries: not needed ({options.kubeconfig})", "binaries"):
            pass
        with report.step("Images: the cluster's own (kind load docker-image ...)", "images"):
            pass
        with report.step("Connecting to the cluster", "cluster"):
            return clusters.external_cluster(options.kubeconfig)
    with report.step(
        "Kubernetes binaries (first run: a ~8 min build from the Go proxy)", "binaries"
    ):
        if clusters.binaries_problem() is not None or node_binaries_problem() is not None:
            clusters.build_binaries(report, work_dir / "logs" / "build-binaries.log")
        else:
            report.say("      cached")
        problem = node_binaries_problem() or binaries.node_problem(binaries.find_bin_dir())
        if problem is not None:
            raise clusters.ClusterError(problem)
    with report.step(
        "Container images from the Dockerfiles (first run: ~6 min, no Docker)", "images"
    ):
        seconds = imagebuild.build(report, spark=options.spark_pods)
        built = [f"{name} {s:.0f}s" for name, s in seconds.items() if s >= 1]
        report.say(f"      built: {', '.join(built)}" if built else "      cached")
    with report.step(
        "Starting the local plane with a real node (kubelet, containerd, kube-proxy)", "plane"
    ):
        plane = planes.REGISTRY.acquire(TIER)
        stack.callback(planes.REGISTRY.release, TIER)
        report.say(f"      up in {plane.start_seconds:.1f}s; KUBECONFIG={plane.kubeconfig}")
    return clusters.local_cluster(plane)


def _import_spark_image(
    cluster: clusters.Cluster, stack: contextlib.ExitStack
) -> concurrent.futures.Future[str] | None:
    """hutch-spark into the node's containerd (~30 s), beside the operator's and the Broker's
    start; ``None`` on another cluster (its images are its own)."""
    if cluster.plane is None:
        return None
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spark-image")
    stack.callback(pool.shutdown, wait=True)  # never tear the plane down under an import
    return pool.submit(cluster.plane.add_image, "spark")


def _drive(
    report: progress.Progress,
    line: chain.Chain,
    options: Options,
    spark_image: concurrent.futures.Future[str] | None,
) -> summaries.Summary:
    with report.step("Applying the CRDs and the namespace", "CRDs"):
        line.apply_crds()
        line.create_namespace()
    with report.step("Installing the operator: helm install charts/hutch-operator", "operator"):
        # On its own plane it watches every namespace (examples/two-teams.yaml uses three);
        # on someone's cluster only the run's (keeping.widen_command says how to widen it).
        line.start_operator(all_namespaces=options.kubeconfig is None)
        report.say(f"      {_pod_line(line)}")
    manifest = TLS_BROKER if options.tls else chain.EXAMPLES / "broker.yaml"
    with report.step(f"Creating the Broker from examples/{manifest.name}", "Broker"):
        if options.tls:
            _apply_tls_secrets(line)
            report.say(f"      Secrets {TLS_SECRET} and {CA_SECRET}: a CA and a certificate for "
                       f"{', '.join(_server_hosts(line))}")  # fmt: skip
        rendered = line.create_broker(manifest)
        report.say("      rendered hutch-broker.conf:")
        for text in rendered.config.splitlines():
            report.say(f"        {text}")
    with report.step("Waiting for the broker Pod; port-forward to loopback", "broker Pod"):
        line.start_broker()
        report.say(f"      {line.endpoint.http_url} (AMQP port {line.endpoint.amqp_port})")
        if line.main.tls is not None:
            report.say(f"      {line.main.tls.describe()}")
    with report.step(
        "Applying Exchanges, Queues, Bindings, a Policy and an OperatorPolicy", "topology"
    ):
        line.apply_topology(chain.EXAMPLES / "topology.yaml")
    with report.step(
        f"Publishing {options.events} JSON events to exchange '{EVENTS_EXCHANGE}'", "publish"
    ):
        stream = pipeline.make_stream(options.events)
        pipeline.publish(line.endpoint, stream, exchange=EVENTS_EXCHANGE)
        report.say(
            f"      {stream.published} confirmed ({stream.duplicates} re-sent duplicates, "
            f"{stream.expiring} with expiration 0, 1 watermark tick)"
        )
    expected = stream.published - stream.expiring
    if spark_image is None:
        with report.step("Running windowed_counts in Spark's local mode (this host)", "Spark job"):
            job = line.job("windowed-counts", EVENTS_QUEUE, max_messages_per_batch=1000)
            child = line.start_job(job, available_now=True)
            _wait_job(report, child, line.management(), job, expected)
        with report.step("Reading what the broker and the job report", "summary"):
            results, output = pipeline.read_results(job.output), job.output
            summary = summaries.collect(line, stream, EVENTS_QUEUE, results, output)
            summary.pods_ran = line.pod_facts()
    else:
        with report.step(
            f"Running windowed_counts as a driver and 2 executor Pods (spark-submit), as User "
            f"{sparkpods.JOB_USER}",
            "Spark job",
        ):
            pod_job = _submit(report, line, spark_image)
            try:
                seen = _wait_job(report, pod_job.child, line.management(), pod_job, expected)
            finally:
                problem = pod_job.finish()
            if problem is not None:
                raise clusters.ClusterError(problem)
        with report.step("Reading what the broker and the job report", "summary"):
            results, output = pod_job.results(), pod_job.output
            summary = summaries.collect(line, stream, EVENTS_QUEUE, results, output)
            summary.pods_ran = line.pod_facts() + pod_job.pod_facts()
            summary.clients = _clients(line, pod_job, seen)
        if options.stream_job and line.main.tls is None:
            with report.step(
                f"Running spark-stream-copy over 2 stream queues as a driver and 2 executor "
                f"Pods ({STREAM_PER_STREAM} messages each)",
                "stream job",
            ):
                ran = _stream_job(report, line, pod_job, spark_image.result())
                summary.stream_job = ran.lines()
                summary.pods_ran += ran.pods_ran
            if not ran.exactly_once:
                raise clusters.ClusterError("\n".join(ran.lines()))
        elif options.stream_job:
            summary.stream_job = [
                "Spark stream job: not run with --tls (its executors read the streams, and the "
                "Pod template gives the CA to the driver only)"
            ]
    summary.steps = list(report.steps)
    return summary


def _submit(
    report: progress.Progress, line: chain.Chain, spark_image: concurrent.futures.Future[str]
) -> sparkpods.PodJob:
    """spark-submit once hutch-spark is in the node's containerd (imported in the background)."""
    began = time.monotonic()
    if not spark_image.done():
        report.say("      waiting for hutch-spark's import into the node's containerd")
    image = spark_image.result()
    if time.monotonic() - began >= 1:
        report.say(f"      imported after another {time.monotonic() - began:.0f}s")
    plane = line.cluster.plane
    job = sparkpods.submit(
        plane, line.cluster, line.namespace, line.work_dir, broker=line.main.name,
        queue=EVENTS_QUEUE, image=image, max_messages_per_batch=1000,
        ca_secret=line.main.tls.ca_secret if line.main.tls is not None else None,
        extra_confs=sparkpods.SHORT_JOB_CONFS,
    )  # fmt: skip
    line.jobs.append(job.child)  # stopped with the chain, on Ctrl-C too
    line.remember("spark-submit", job.child.pid)
    return job


def _stream_job(
    report: progress.Progress, line: chain.Chain, windowed: sparkpods.PodJob, image: str
) -> streamjob.StreamRun:
    """examples/spark-stream-copy.py on the windowed job's volume (its own directory there),
    as the stream queues' own User; stopped with the chain on Ctrl-C."""
    where = streamjob.NodeJob(
        cluster=line.cluster, plane=line.cluster.plane, namespace=line.namespace,
        broker=line.main.name, endpoint=line.endpoint, volume_dir=windowed.volume_dir,
        work=line.work_dir,
    )  # fmt: skip

    def started(child: launchers.Child) -> None:
        line.jobs.append(child)
        line.remember("spark-submit (stream job)", child.pid)

    return streamjob.run(
        where, image, per_stream=STREAM_PER_STREAM, max_offsets=STREAM_MAX_OFFSETS,
        started=started, tick=report.update, timeout=JOB_TIMEOUT,
    )  # fmt: skip


def _wait_job(
    report: progress.Progress,
    child: launchers.Child,
    mgmt: management.Management,
    job: pipeline.JobRun | sparkpods.PodJob,
    expected: int,
) -> set[tuple[str, bool]]:
    """Waits for the job, drawing a bar from the broker's ack count on the queue; returns the
    (user, ssl) of the connections the broker listed meanwhile (only for a TLS endpoint), read
    on each poll until the job's User appears among them."""
    began, said = time.monotonic(), ""
    seen: set[tuple[str, bool]] = set()
    listing = mgmt.context is not None  # until the job's own connection was listed
    while child.running:
        if listing:
            seen |= _connections(mgmt)
            listing = not any(user == sparkpods.JOB_USER for user, _ in seen)
        elapsed = time.monotonic() - began
        if elapsed > JOB_TIMEOUT:
            child.stop()
            raise clusters.ClusterError(f"Spark job still running after {JOB_TIMEOUT}s")
        acked, batches = summaries.acked(mgmt, job.queue), job.committed_batches()
        if acked == 0 and batches == 0:
            starting = (
                job.starting()
                if isinstance(job, sparkpods.PodJob)
                else "starting Spark (JVM, session, first batch)"
            )
            label = f"{elapsed:.0f}s: {starting}"
            if starting != said and not report.interactive:  # a log: each stage once
                report.say(f"      {label}")
                said = starting
        else:
            label = f"{elapsed:.0f}s: {acked}/{expected} acked, {batches} batches committed"
        report.update(acked / max(expected, 1) * 0.99, label)
        time.sleep(1)
    report.update(1.0, f"{job.committed_batches()} batches committed")
    if child.proc.returncode != 0:
        raise clusters.ClusterError(
            f"Spark job exited with {child.proc.returncode}:\n{child.log_tail()}"
        )
    return seen


def _connections(mgmt: management.Management) -> set[tuple[str, bool]]:
    listed = mgmt.get("/connections")
    body = listed.body if listed.ok and isinstance(listed.body, list) else []
    return {(str(c.get("user")), bool(c.get("ssl"))) for c in body}


def _server_hosts(line: chain.Chain) -> tuple[str, ...]:
    return clienttls.server_hosts(line.main.name, line.namespace)


def _apply_tls_secrets(line: chain.Chain) -> None:
    """A CA made now and its certificate for the Broker's Service names (and loopback, where
    the port-forward is): the ``kubernetes.io/tls`` Secret and the CA Secret of
    examples/broker-tls.yaml."""
    hosts = _server_hosts(line)
    leaf = certs.Authority("Hutch quickstart CA").issue(hosts[0], hosts=hosts)
    line.cluster.apply(line.namespace, clusters.manifest(*tls_secrets(leaf)))


def tls_secrets(leaf: certs.Leaf) -> list[dict[str, Any]]:
    """The two Secrets of examples/broker-tls.yaml for ``leaf`` (cert-manager's shape)."""
    meta = {"labels": {"app.kubernetes.io/part-of": "hutch-quickstart"}}
    ca = base64.b64encode(leaf.ca_pem).decode()
    return [
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
         "metadata": {"name": TLS_SECRET, **meta}, "data": leaf.secret_data()},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": CA_SECRET, **meta}, "data": {clienttls.CA_KEY: ca}},
    ]  # fmt: skip


def _clients(line: chain.Chain, job: sparkpods.PodJob, seen: set[tuple[str, bool]]) -> list[str]:
    """The summary's lines on how the clients connected."""
    tls = line.main.tls
    if tls is None:
        return []
    listed = ", ".join(f"{user} ssl={ssl}" for user, ssl in sorted(seen)) or "none"
    driver = job.driver() or {}
    containers = driver.get("spec", {}).get("containers") or [{}]
    env = {e["name"]: e.get("value") for e in containers[0].get("env") or []}
    mounts = [m["mountPath"] for m in containers[0].get("volumeMounts") or []]
    return [
        tls.describe(),
        f"  publisher and checks here: {_redacted(line.endpoint.amqp_url)}, "
        f"{line.endpoint.http_url}",
        f"  Spark driver Pod (its spec): HUTCH_AMQP_URI={env.get('HUTCH_AMQP_URI')}, "
        f"HUTCH_AMQP_CA_FILE={env.get('HUTCH_AMQP_CA_FILE')}, "
        f"{clienttls.CA_MOUNT} {'mounted' if clienttls.CA_MOUNT in mounts else 'NOT mounted'}",
        f"  connections the broker listed during the job: {listed}",
    ]


def _redacted(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"


def _out(text: str) -> None:
    """The summary goes to stdout (progress went to stderr), so it can be captured alone."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _save_ca(line: chain.Chain, work_dir: Path) -> Path | None:
    """--keep with a TLS Broker: its CA certificate as a file for the user's clients."""
    if not line.endpoint.ca_pem:
        return None
    path = work_dir / "ca.crt"
    path.write_text(line.endpoint.ca_pem)
    return path


def _wait_for_interrupt(line: chain.Chain, report: progress.Progress) -> None:
    """--keep: until Ctrl-C. A broker Pod deleted or rolled meanwhile gets a new port-forward
    on the same ports (``keeping``); nothing ends the run but Ctrl-C or SIGTERM."""
    follower = keeping.Follower(line, lambda text: report.say(f"  keep: {text}"))
    try:
        while True:
            follower.check()
            time.sleep(1)
    except KeyboardInterrupt:
        return


def keep_help(line: chain.Chain, options: Options) -> str:
    """What --keep prints beside ``summaries.connection_help``: the kubectl and API server the
    run uses (Spark's ``--master``), which namespaces the operator watches, and that deleted or
    rolled broker Pods are followed."""
    facts = keeping.cluster_facts(line.cluster)
    if options.kubeconfig is None:
        watched = "every namespace (a ClusterRole): Hutch objects anywhere get status and Events"
    else:
        watched = (
            f"namespace {line.namespace} only; to watch every namespace: "
            f"{widen_command(line.namespace)}"
        )
    return "\n".join(
        [
            f"  kubectl:         {facts['kubectl']}",
            f"  API server:      {facts['server']}  (spark-submit --master "
            f"k8s://{facts['server']})",
            f"  Operator:        watches {watched}",
            "  A broker Pod deleted or rolled gets a new port-forward on the same ports;",
            "  the plane stays up until Ctrl-C, which stops it and removes its directory.",
        ]
    )


def widen_command(namespace: str) -> str:
    """The helm upgrade that makes a namespaced release watch every namespace."""
    return (
        f"helm upgrade {releases.RELEASE} charts/hutch-operator -n {namespace} --reuse-values "
        "--set-json 'watchNamespaces=[]'"
    )


def _removing(cluster: clusters.Cluster, work_dir: Path) -> str:
    """Said before a kept run's teardown: never remove the plane's directory silently."""
    plane = cluster.plane
    where = f"the plane's directory {plane.run_dir} and " if plane is not None else ""
    return f"stopping everything; removing {where}the work directory {work_dir}"


def _pod_line(line: chain.Chain) -> str:
    facts = line.pod_facts()
    return facts[0].line() if facts else "(no Pod)"


def node_binaries_problem() -> str | None:
    """Why the node tier's binaries are not all there (kubelet, kube-proxy, ...), or None."""
    try:
        binaries.check_binaries(binaries.find_bin_dir(), TIER)
    except binaries.BinariesMissingError as exc:
        return str(exc)
    return None


def _exit_on_signals() -> dict[int, Callable[[int, FrameType | None], object] | int | None]:
    """SIGTERM/SIGHUP unwind like Ctrl-C, so every ``finally`` stops its processes in order."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hutch_demo.quickstart", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--keep", action="store_true", help="keep everything up until Ctrl-C")
    parser.add_argument("--events", type=int, default=3000, help="JSON events to publish")
    parser.add_argument("--kubeconfig", type=Path, help="an external cluster (kind) instead")
    parser.add_argument("--namespace", default="quickstart")
    parser.add_argument(
        "--spark-local",
        action="store_true",
        help="run the Spark job in local mode on this host instead of as Pods (minutes faster "
        "on 2 cores: no hutch-spark import, no driver and executor JVMs starting in Pods)",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="a Broker with spec.tls (examples/broker-tls.yaml, a CA and certificate made here); "
        "the publisher, checks and Spark Pods connect over TLS",
    )
    parser.add_argument(
        "--no-stream-job",
        dest="stream_job",
        action="store_false",
        help="leave out the last step, examples/spark-stream-copy.py over two stream queues as "
        "a driver and 2 executor Pods (about 50 s; it runs only when Spark runs as Pods)",
    )
    args = parser.parse_args(argv)
    if args.tls and (args.spark_local or args.kubeconfig is not None):
        parser.error("--tls runs the Spark job as Pods on the local node only")
    try:
        run(
            keep=args.keep,
            events=args.events,
            kubeconfig=args.kubeconfig,
            namespace=args.namespace,
            spark_pods=not args.spark_local,
            tls=args.tls,
            stream_job=args.stream_job,
        )
    except KeyboardInterrupt:
        sys.stderr.write("interrupted; everything the quickstart started is stopped\n")
        return 130
    except (clusters.ClusterError, processes.BrokerStartError) as exc:
        sys.stderr.write(f"quickstart failed: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
