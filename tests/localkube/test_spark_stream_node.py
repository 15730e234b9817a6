"""A stream-queue job as driver and executor Pods on the real node, an executor Pod and then
the driver Pod killed mid-run, and the output exactly once with no dedupe (issue 28, part 3).

Why: the stream source's promise (docs/spark.md, "Read stream queues") is that the driver only
plans offsets and the executors read them, so a batch replayed after a failure reads the same
messages and Spark's file sink needs no dedupe. tests/spark/test_streamdriver.py shows it in
local mode, where "executors" are threads of one JVM and a kill takes all of them at once. Here
the pieces are apart, as a user runs them: the host's spark-submit (cluster mode) starts a
driver Pod and two executor Pods of the hutch-spark image on ``hutch-node``; the job is
examples/spark-stream-copy.py from a ConfigMap (docs/spark.md, "Run your own job"); it reads
two stream queues of the Broker of examples/broker.yaml as a User of its own (read on the two
streams, tag ``monitoring`` for the management API), 2 slices per stream per batch and
``maxOffsetsPerTrigger`` well below what is held, so it takes many micro-batches, and writes
Parquet with its checkpoint on a PVC. The first run keeps running (the job's
``--processing-time``) and the test publishes more to both streams whenever the job's planned
batches come within two of the end, so the job can never run out of work before the kills are
done, however fast or slow the machine (a run that ended by itself after 16 batches failed the
test once); the resumed run reads what is there and ends by itself (availableNow).

Mid-run, at a moment when a task is reading (the broker lists a consumer on one of the
streams from an executor's address) and batches are still to come:

1. an executor Pod is force-deleted (``--grace-period=0 --force``): Spark fails the task it
   was running (its log says so), runs it again on another executor, and asks Kubernetes for a
   replacement Pod;
2. then every process of the driver's container is killed with ``kill -9`` inside a
   micro-batch that is in the offsets log and not in the commit log, while a task reads if one
   is caught within ``CATCH_A_READ_S`` (a read is tens of milliseconds of a one-second trigger;
   one official CI run caught none in 300 s after three executor kills and failed without a
   word on why: a job that stops committing now fails with the driver's log); the same
   spark-submit, with the same checkpoint, starts a new driver.

Asserted: the second driver Succeeded, replayed the killed batch with the range it had logged,
and the files the sink's log commits hold every message of both streams exactly once (each
``(stream, offset)`` with the ``message_id`` published there); every AMQP connection of the job
the broker listed came from an executor Pod, none from a driver Pod; at the end no connection of
the job is open and the streams have no consumer.
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hutch_demo import (
    clusters,
    launchers,
    management,
    pipeline,
    pods,
    sparkpods,
    sparksubmit,
    streamjob,
    waiting,
)

from tests.spark.reruns import batch_end

REPO = clusters.REPO_ROOT
JOB = streamjob.JOB
STREAMS = streamjob.STREAMS
# Published before the job starts: 6 batches. The feed (below) keeps the first run in work
# until the kills are done, so what is held up front only has to last until the feed's first
# look; whatever is left after the driver's kill the resumed run reads to the end. Issue 29:
# 12000 (16 batches) left the resumed run about 10 batches to read.
PER_STREAM = 4500
MORE = 3000  # published per stream whenever the running job gets within two batches of the end
MAX_OFFSETS = 1500  # per batch over both streams
PROCESSING_TIME = "1 second"  # the first run's trigger: it runs until the driver is killed
CHECKPOINT = streamjob.CHECKPOINT
OUTPUT = streamjob.OUTPUT
SUBMIT_TIMEOUT = 600
POLL_S = 0.1
# How Spark 4.3's driver words a task lost with its executor, in its log.
LOST_TASK = ("Lost task", "its executor exited for a reason unrelated to the task")
# A force-deleted executor Pod is removed from Spark when its connection drops or, at the
# latest, when the Pod has been missing for spark.kubernetes.executor.missingPodDetectDelta
# (30 s); its running tasks are failed then.
LOSS_NOTICED_S = 60
# The driver is killed inside a batch: first one caught while a task reads (a consumer on a
# stream from an executor); a read lasts tens of milliseconds of a 1 s trigger, so if none is
# caught in this long, any batch in flight (logged, not committed) will do. A job that commits
# nothing more fails either way, with what the driver said.
CATCH_A_READ_S = 150
IN_FLIGHT_S = 150


@pytest.mark.k8s
@pytest.mark.spark
@pytest.mark.timeout(1500)  # a cold hutch-spark build is minutes
def test_stream_job_pods_are_exactly_once_through_an_executor_and_a_driver_kill(
    node: Any, spark_image: str, k8s_namespace: str, tmp_path: Path
) -> None:
    with sparkpods.on_node(node, k8s_namespace, tmp_path) as setup:
        _run(node, setup.cluster, k8s_namespace, spark_image, setup.volume, tmp_path)


def _run(
    node: Any, cluster: clusters.Cluster, ns: str, image: str, volume: str, work: Path
) -> None:
    t0 = time.monotonic()
    endpoint = sparkpods.example_broker(cluster, ns)
    began = time.monotonic()
    _publish(endpoint)
    _say(f"published {PER_STREAM} confirmed messages to each of {STREAMS} in "
         f"{time.monotonic() - began:.1f}s")  # fmt: skip
    feed = _Feed(endpoint, PER_STREAM)
    secret = streamjob.stream_user(cluster, ns)
    template = streamjob.install_job(cluster, ns, work)
    cluster.apply(ns, clusters.manifest(*sparksubmit.driver_rbac(ns)))
    claim = sparksubmit.claim("spark-data", ns, volume, "1Gi")
    cluster.apply(ns, clusters.manifest(claim))
    pv_dir = node.node_layout.volumes_dir / volume
    checkpoint = pv_dir / Path(CHECKPOINT).relative_to(sparksubmit.MOUNT)
    output = pv_dir / Path(OUTPUT).relative_to(sparksubmit.MOUNT)

    first = _submission(node.server, ns, template, image, secret, "stream-copy",
                        processing_time=PROCESSING_TIME)  # fmt: skip
    env = sparkpods.environment(node.kubeconfig)
    watch = _Watch(cluster, ns, management.Management(endpoint))
    began = time.monotonic()
    submit = sparkpods.start_submit(first, env, work / "spark-submit-1.log")
    try:
        killed = _disrupt(watch, first, submit, checkpoint, feed)
        submit.wait(timeout=120)  # it follows the driver Pod, which is gone
    finally:
        _stop(submit)
    _say(f"first spark-submit exited {submit.returncode} {time.monotonic() - began:.0f}s "
         "after it started")  # fmt: skip

    second = _submission(node.server, ns, template, image, secret, "stream-copy-resumed")
    began = time.monotonic()
    resumed = sparkpods.start_submit(second, env, work / "spark-submit-2.log")
    try:
        waiting.wait_for(lambda: watch.poll(second.driver_pod) or resumed.poll() is not None,
                         timeout=SUBMIT_TIMEOUT, interval=POLL_S,
                         what="the resumed job's end")  # fmt: skip
        resumed.wait(timeout=60)
    finally:
        _stop(resumed)
    log = (work / "spark-submit-2.log").read_text(errors="replace")
    _say(f"resumed job: spark-submit exited {resumed.returncode} "
         f"{time.monotonic() - began:.0f}s after it started")  # fmt: skip
    assert resumed.returncode == 0, log[-3000:]
    driver = pods.get_pod(cluster, ns, second.driver_pod)
    assert driver is not None and driver["status"]["phase"] == "Succeeded", log[-3000:]
    pods.save_logs(cluster, ns, work / "pod-logs")
    for pod in [driver, *pods.list_pods(cluster, ns, "spark-role=executor")]:
        facts = pods.facts(pod)
        _say(f"  {facts.line()}")
        assert facts.node == "hutch-node", facts
        assert facts.containers and all(c.startswith("containerd://") for _, c in facts.containers)

    # The replay: the killed batch ran again with the range the first driver had logged.
    assert batch_end(checkpoint, killed.batch) == killed.end
    committed = sorted(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))
    _say(f"{len(committed)} micro-batches committed in all; batch {killed.batch} "
         f"[{killed.start} -> {killed.end}) replayed")  # fmt: skip

    # Exactly once, read through the file sink's log; nothing deduplicated anywhere.
    files = pipeline.committed_files(output, root=(sparksubmit.MOUNT, pv_dir))
    rows = [
        (row["stream"], row["offset"], row["message_id"])
        for path in files
        for row in pq.read_table(path, columns=["stream", "offset", "message_id"]).to_pylist()
    ]
    on_disk = {p.name for p in output.glob("part-*.parquet")}
    orphans = on_disk - {p.name for p in files}
    orphan_rows, cut = 0, 0
    for name in sorted(orphans):
        try:
            orphan_rows += pq.read_metadata(output / name).num_rows
        except pa.ArrowInvalid:  # a file the kill cut off while it was written
            cut += 1
    _say(f"{len(rows)} committed rows in {len(files)} files; {len(orphans)} files on disk "
         f"that the sink's log does not list (left by the killed batches), {cut} of them cut "
         f"off and the rest with {orphan_rows} rows: a reader of the directory without the "
         "log would count those twice")  # fmt: skip
    twice = [key for key, n in Counter((s, o) for s, o, _ in rows).items() if n > 1]
    assert not twice, f"{len(twice)} offsets twice in the output, e.g. {twice[:5]}"
    _say(f"{feed.per_stream} messages published to each stream in all "
         f"({feed.per_stream - PER_STREAM} while the first run ran)")  # fmt: skip
    assert sorted(rows) == [
        (stream, n, f"{stream}-{n}") for stream in STREAMS for n in range(feed.per_stream)
    ]

    # Only executors consumed: every job connection the broker listed came from an executor
    # Pod's address, none from a driver's; none is left open, and no stream has a consumer.
    _say(f"job connections seen on the broker: {len(watch.connections)} from "
         f"{sorted(set(watch.connections.values()))}; driver Pods at "
         f"{sorted(watch.driver_ips)}, executor Pods at {sorted(watch.executor_ips)}")  # fmt: skip
    assert watch.connections, "the broker never listed a reading connection"
    assert not set(watch.connections.values()) & watch.driver_ips, watch.connections
    assert set(watch.connections.values()) <= set(watch.executor_ips), watch.connections

    # Waited for, not read once: the driver's end does not wait for the executors' JVMs, so an
    # executor's connection may still be closing when the driver Pod has Succeeded.
    def closed() -> tuple[dict[str, str], dict[str, int]]:
        consumers = {stream: int(watch.mgmt.queue(stream)["consumers"]) for stream in STREAMS}
        return watch.job_connections(), consumers

    waiting.wait_for(closed, lambda found: not found[0] and not any(found[1].values()),
                     timeout=60, interval=0.5,
                     what="no job connection and no stream consumer left")  # fmt: skip
    _say(f"whole test {time.monotonic() - t0:.0f}s after the broker was asked for")


@dataclass
class _Killed:
    """The batch the driver died in: its number and the ranges of the offsets log."""

    batch: int
    start: dict[str, int]
    end: dict[str, int]


@dataclass
class _Feed:
    """More messages for the running job when it nears the end of what is there: the first
    run must still have batches to read when each kill comes, however fast it reads."""

    endpoint: launchers.Endpoint
    per_stream: int  # messages in each stream, offsets 0 .. per_stream - 1

    def keep_ahead(self, checkpoint: Path) -> None:
        """Publishes ``MORE`` to each stream once the newest batch in the offsets log ends
        within two batches of the streams' ends."""
        planned = _planned(checkpoint)
        if planned < len(STREAMS) * self.per_stream - 2 * MAX_OFFSETS:
            return
        confirmed = streamjob.publish(self.endpoint, MORE, start=self.per_stream)
        assert confirmed == len(STREAMS) * MORE, confirmed
        self.per_stream += MORE


@dataclass
class _Watch:
    """The job as the broker and the apiserver see it, polled: the reading connections (name
    to peer address) and the driver and executor Pods' addresses."""

    cluster: clusters.Cluster
    ns: str
    mgmt: management.Management
    connections: dict[str, str] = field(default_factory=dict)
    driver_ips: set[str] = field(default_factory=set)
    executor_ips: dict[str, str] = field(default_factory=dict)  # ip -> Pod

    def job_connections(self) -> dict[str, str]:
        """The job's connections open now: name -> peer address."""
        listed = self.mgmt.get("/connections")
        assert listed.ok, listed
        found = {
            str(item["client_properties"].get("connection_name", "")): str(item["peer_host"])
            for item in listed.body
        }
        return {name: peer for name, peer in found.items() if name.startswith("hutch-spark")}

    def poll(self, driver_pod: str) -> bool:
        """Records what is open now; True once the driver Pod has ended."""
        for pod in pods.list_pods(self.cluster, self.ns, "spark-role"):
            ip = pod.get("status", {}).get("podIP")
            if not ip:
                continue
            if pod["metadata"]["labels"]["spark-role"] == "driver":
                self.driver_ips.add(ip)
            else:
                self.executor_ips[ip] = pod["metadata"]["name"]
        open_now = self.job_connections()
        self.connections.update(open_now)
        driver = pods.get_pod(self.cluster, self.ns, driver_pod)
        phase = (driver or {}).get("status", {}).get("phase")
        return phase in ("Succeeded", "Failed")

    def reading_executor(self) -> str | None:
        """An executor Pod with a consumer on one of the streams right now: a task reading a
        slice. An open connection is not enough, since an executor keeps its connection for its
        next slice and closes only the channel (``streamwire.release``); two of three Pods
        removed while they only held a connection cost Spark no task."""
        listed = self.mgmt.get("/consumers")
        assert listed.ok, listed
        for item in listed.body:
            peer = item.get("channel_details", {}).get("peer_host")
            if item["queue"]["name"] in STREAMS and peer in self.executor_ips:
                return self.executor_ips[peer]
        return None


def _disrupt(
    watch: _Watch,
    sub: sparksubmit.Submission,
    submit: subprocess.Popen[bytes],
    checkpoint: Path,
    feed: _Feed,
) -> _Killed:
    """Kills an executor Pod while it reads, then the driver inside a batch; see the module
    doc. An executor Pod removed between two of its tasks costs Spark no task, so up to three
    are removed, each while it reads, until the driver's log shows a lost task. The job never
    runs out of work meanwhile: every probe lets ``feed`` publish more when it nears the end."""
    cluster, ns = watch.cluster, watch.ns
    t0 = time.monotonic()

    def running() -> None:
        assert submit.poll() is None, "spark-submit ended before the kills were done"
        assert not watch.poll(sub.driver_pod), "the driver Pod ended before the kills"
        feed.keep_ahead(checkpoint)

    def committed() -> int:
        return len(list((checkpoint / "commits").glob("[0-9]*"))) if checkpoint.is_dir() else 0

    def victim() -> str | None:
        running()
        return watch.reading_executor() if committed() >= 2 else None

    def lost_tasks() -> list[str]:
        log = cluster.kubectl("logs", "-n", ns, sub.driver_pod, check=False).stdout
        return [line for line in log.splitlines() if any(t in line for t in LOST_TASK)]

    lost: list[str] = []
    for attempt in range(1, 4):
        executor = waiting.wait_for(victim, timeout=420, interval=POLL_S,
                                    what="an executor reading after two committed batches")  # fmt: skip
        before = committed()
        _force_delete(cluster, ns, executor)
        _say(f"+{time.monotonic() - t0:.1f}s force-deleted executor Pod {executor} while it "
             f"read, {before} batches committed")  # fmt: skip
        deadline = time.monotonic() + LOSS_NOTICED_S
        while not lost and time.monotonic() < deadline:
            running()
            lost = lost_tasks()
            time.sleep(0.5)
        if lost:
            break
        _say(f"  attempt {attempt}: no task was running on it")
    _say(f"  the driver's log on the executor's tasks: {lost[:2]}")
    assert lost, "three executor Pods removed while reading, and Spark lost no task"
    after_executor = committed()

    def in_flight(reading: bool) -> int | None:
        """A batch in the offsets log, not in the commit log (with `reading`, while a task
        reads)."""
        running()
        done = committed()
        if done < after_executor + 2 or (reading and watch.reading_executor() is None):
            return None
        logged = (checkpoint / "offsets" / str(done)).is_file()
        return done if logged and not (checkpoint / "commits" / str(done)).exists() else None

    # The kill is armed before the batch is looked for: a shell in the driver's container that
    # kills every process of it (kill -9 -1) when it reads a line. A batch is in flight for its
    # reads and commit only, tens of milliseconds of the 1 s trigger, less than kubectl's own
    # start-up, so a kill started once the batch is seen could land after its commit.
    armed = subprocess.Popen(
        [str(cluster.kubectl_path), f"--kubeconfig={cluster.kubeconfig}", "exec", "-i", "-n", ns,
         sub.driver_pod, "--", "sh", "-c", "read _ && kill -9 -1"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        batch = waiting.wait_for(lambda: in_flight(True), timeout=CATCH_A_READ_S,
                                 interval=POLL_S,
                                 what="a batch in flight with a task reading")  # fmt: skip
    except AssertionError:
        _say(f"  +{time.monotonic() - t0:.1f}s no read caught inside a batch in "
             f"{CATCH_A_READ_S} s ({committed()} batches committed, {after_executor} at the "
             "executor's loss): any batch in flight will do")  # fmt: skip
        try:
            batch = waiting.wait_for(lambda: in_flight(False), timeout=IN_FLIGHT_S,
                                     interval=POLL_S / 2,
                                     what="a batch in flight")  # fmt: skip
        except AssertionError as stalled:
            raise AssertionError(
                f"{stalled}; {committed()} batches committed ({after_executor} at the "
                f"executor's loss), executor Pods {sorted(set(watch.executor_ips.values()))}; "
                f"the driver's log ends: {_log_tail(cluster, ns, sub.driver_pod)}"
            ) from None
    # kill -9 of every process of the driver's container but its init (tini): the JVM and its
    # Python workers die at once, as in a node crash; the container then ends, and the Pod.
    assert armed.stdin is not None and armed.poll() is None, "the armed kill's exec ended early"
    armed.stdin.write("kill\n")
    armed.stdin.flush()
    with contextlib.suppress(subprocess.TimeoutExpired):
        armed.wait(timeout=60)  # its stream ends with the container
    ended = waiting.wait_for(lambda: watch.poll(sub.driver_pod), timeout=60, interval=POLL_S,
                             what="the killed driver Pod's end")  # fmt: skip
    phase = (pods.get_pod(cluster, ns, sub.driver_pod) or {}).get("status", {}).get("phase")
    assert ended and phase == "Failed", phase  # spark-submit itself may still exit 0
    logged = max(int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*"))
    assert not (checkpoint / "commits" / str(logged)).exists(), "killed between two batches"
    killed = _Killed(logged, batch_end(checkpoint, logged - 1), batch_end(checkpoint, logged))
    _say(f"+{time.monotonic() - t0:.1f}s killed the driver (kill -9) inside batch {logged} "
         f"(seen in flight: {batch}; {killed.start} -> {killed.end}; "
         f"{feed.per_stream} published to each stream)")  # fmt: skip
    assert sum(killed.end.values()) < len(STREAMS) * feed.per_stream  # batches still to come
    return killed


def _log_tail(cluster: clusters.Cluster, ns: str, pod: str, lines: int = 25) -> list[str]:
    """The last lines of a Pod's log that are not INFO, for a failure's message."""
    log = cluster.kubectl("logs", "-n", ns, pod, check=False).stdout.splitlines()
    return [line for line in log if " INFO " not in line][-lines:]


def _force_delete(cluster: clusters.Cluster, ns: str, pod: str) -> None:
    """``kubectl delete pod --grace-period=0 --force``, straight to the apiserver (no kubectl
    start-up between seeing the Pod read and removing it)."""
    assert cluster.plane is not None
    path = f"/api/v1/namespaces/{ns}/pods/{pod}"
    status, reply = cluster.plane.api("DELETE", path, {"gracePeriodSeconds": 0})
    assert status == 200, (status, reply)


def _submission(
    api_server: str, ns: str, template: Path, image: str, secret: str, app: str,
    processing_time: str | None = None,
) -> sparksubmit.Submission:  # fmt: skip
    """The job from the ConfigMap, two executors, the User's credentials on every Pod
    (``streamjob.submission``, as make run submits it), ``MAX_OFFSETS`` a batch; with
    ``processing_time`` it runs until stopped."""
    return streamjob.submission(api_server, ns, template, image, secret, app,
                                max_offsets=MAX_OFFSETS,
                                processing_time=processing_time)  # fmt: skip


def _publish(endpoint: launchers.Endpoint) -> None:
    """``streamjob.publish``: both streams declared and filled, every message confirmed;
    message ``n`` of a stream has id ``<stream>-<n>`` and lands at offset ``n``."""
    assert streamjob.publish(endpoint, PER_STREAM) == len(STREAMS) * PER_STREAM
    listed = management.Management(endpoint)
    for stream in STREAMS:
        item = listed.queue(stream)
        assert (item["type"], item["first_offset"], item["next_offset"]) == (
            "stream", 0, PER_STREAM,
        ), item  # fmt: skip


def _planned(checkpoint: Path) -> int:
    """Offsets over both streams up to the end of the newest batch in the offsets log (0 before
    the first); Spark writes each log file whole (a rename), so a file seen is complete."""
    logged = [int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")]
    return sum(batch_end(checkpoint, max(logged)).values()) if logged else 0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _say(text: str) -> None:
    sys.stderr.write(f"  {text}\n")


def test_the_submission_gives_the_executors_the_users_credentials_and_the_job_its_options() -> None:
    """The executors consume, so they get the User's Secret as the driver does; the job file
    accepts the arguments the test passes."""
    sub = _submission("https://127.0.0.1:1", "t", Path("t.json"), "img", "u-creds", "app")
    words = sparksubmit.command(sub)
    for role in ("driver", "executor"):
        for key, field_ in (("USERNAME", "username"), ("PASSWORD", "password")):
            conf = f"spark.kubernetes.{role}.secretKeyRef.HUTCH_AMQP_{key}=u-creds:{field_}"
            assert conf in words, words
    spec = importlib.util.spec_from_file_location("stream_copy", JOB)
    assert spec is not None and spec.loader is not None
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    args = job.parse_args(words[words.index(sub.job_file) + 1 :])
    assert (args.streams, args.checkpoint, args.output) == (",".join(STREAMS), CHECKPOINT, OUTPUT)
    assert (args.max_offsets_per_trigger, args.num_partitions) == (MAX_OFFSETS, 2)
    assert args.processing_time is None  # the resumed run stops by itself (availableNow)
    running = _submission("https://127.0.0.1:1", "t", Path("t.json"), "img", "u-creds", "app",
                          processing_time=PROCESSING_TIME)  # fmt: skip
    words = sparksubmit.command(running)
    args = job.parse_args(words[words.index(running.job_file) + 1 :])
    assert args.processing_time == PROCESSING_TIME  # the first run runs until it is killed
