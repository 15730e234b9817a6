"""The stream source's scaling benchmark: 1 against 2 executor Pods on the real node.

Why: issue 28 promises that with option ``streams`` the driver only plans offsets and the
executors read, so a stream query reads faster with more executors and the driver's CPU per
message is near zero. bench/stream_bench.py measures the source in local mode, where executors
are threads of one JVM; this script measures it as users run it: the local plane's node tier,
the operator released with ``helm install``, examples/broker.yaml's Broker as a Pod (with a CPU
limit, below), ``--streams`` stream queues filled from this host with ``--messages`` messages
of ``--body-size`` bytes, then bench/stream_pods_job.py submitted with docs/spark.md's
spark-submit command (``hutch_demo.sparksubmit``: a driver Pod and 1 or 2 executor Pods). Runs
with 1 and with 2 executors alternate (bench/rounds.py), ``--repeat`` rounds; each run reads
every stream from its first offset, with a fresh checkpoint.

Per run:
- read rate: the messages over the query's time, from its first batch's start to its last
  batch's end (the query's own progress reports; JVM start, executor registration and a
  warm-up read are before it);
- CPU seconds per million messages of the driver Pod (its container's cgroup v1
  ``cpuacct.usage``, read by the job around the query and by this host's sampler), of the
  executor Pods and of the broker Pod (this host samples their cgroups every 0.2 s and
  interpolates at the query's start and end).

CPU shares on a 2-core machine: each executor Pod gets ``--executor-cpu`` (request = limit, a
CFS quota) and the broker Pod a limit of ``--broker-cpu``. With the defaults (0.4 each, broker
1) one executor is held to 0.4 CPU and two to 0.8, while the broker, the driver and the rest of
the machine share what is left: the figure then says whether the source turns a second
executor's CPU into reading, with the broker and the driver not the bottleneck. Without limits
one executor already takes a core and two cannot get a second one beside the broker, so the
ratio measures the machine, not the source. A benchmark, not a test: nothing here runs in CI.

    python bench/stream_pods_bench.py [--messages 1000000] [--max-per-trigger 250000]
        [--body-size 200] [--streams 4] [--partitions 2] [--repeat 3] [--executor-cpu 0.4]
        [--broker-cpu 1] [--node-cpu-shares 8192] [--warm-up 2000]

`--conf spark.KEY=VALUE` (repeatable) adds a spark-submit conf, e.g. the executors' JVM options
(`spark.executor.extraJavaOptions`). The submission is docs/spark.md's, so executors below a
whole core run their JIT at C1 only (`hutch_demo.sparksubmit.FRACTIONAL_EXECUTOR_JVM`);
`--conf spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=4` gives them the JVM's default
tiers back, to weigh what C2 costs at a small quota.

`--warm-up` is the offsets per stream of the job's warm-up batch read (8,000 messages with the
defaults). On a slow CPU (an AMD EPYC at 2 GHz, docs/bench/report.md) one executor at 0.4 CPU
was still warming its JVM through the whole timed query (16 s to 8 s a batch); with a warm-up
of a batch's size (62,500 a stream) both rates rose by a sixth and the ratio stayed 1.57x.

The defaults make each task a slice of 31,250 messages: at 6,250 (200,000 messages, 50,000 a
batch) the executors spent 2.7x the CPU per message on each task's start, which hides the
read.

It takes the node lock as the node tests do (a node-tier plane waits for it, see
HUTCH_NODE_LOCK_WAIT) and needs the node tier's binaries and the hutch-spark image.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import machineinfo
import nodesetup
import rounds

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
NAMESPACE = "stream-bench"
JOB_DIR = "bench"  # on the job's volume, mounted at sparksubmit.MOUNT in the Pods
ADMIN_SECRET = "hutch-default-user"  # noqa: S105 - a Secret's name: the bench declares streams
CGROUP_CPUACCT = Path("/sys/fs/cgroup/cpuacct")
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
SAMPLE_S = 0.2
RUN_TIMEOUT_S = 900
BROKER_POD = "hutch-server-0"


# --- figures (pure) --------------------------------------------------------------------------


def read_window(batches: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """The query's reading time as epoch seconds: its first batch's start, its last's end."""
    if not batches:
        raise ValueError("the query reported no batch with rows")
    first = min(b["start"] for b in batches)
    last = max(b["start"] + b["seconds"] for b in batches)
    return first, last


def read_rate(batches: Sequence[dict[str, Any]]) -> float:
    """Rows per second over the read window."""
    first, last = read_window(batches)
    rows = sum(b["rows"] for b in batches)
    if last <= first:
        raise ValueError(f"an empty read window [{first}, {last}]")
    return rows / (last - first)


def usage_at(samples: Sequence[tuple[float, int]], when: float) -> float:
    """A cgroup's ``cpuacct.usage`` (ns) at ``when``, interpolated between the samples around
    it; outside the samples, the nearest one (a Pod's CPU before its first sample is what the
    first shows, since the sampler finds Pods as they start)."""
    if not samples:
        raise ValueError("no samples")
    times = [t for t, _ in samples]
    index = bisect.bisect_left(times, when)
    if index == 0:
        return float(samples[0][1])
    if index == len(samples):
        return float(samples[-1][1])
    (t0, u0), (t1, u1) = samples[index - 1], samples[index]
    return u0 + (u1 - u0) * (when - t0) / (t1 - t0) if t1 > t0 else float(u1)


def cpu_seconds(samples: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """CPU seconds a cgroup used between ``start`` and ``end``."""
    return (usage_at(samples, end) - usage_at(samples, start)) / 1e9


def per_million(seconds: float | None, messages: int) -> float | None:
    return None if seconds is None else seconds / messages * 1e6


def run_figures(
    job: dict[str, Any], samples: dict[str, list[tuple[float, int]]], roles: dict[str, str]
) -> dict[str, Any]:
    """One run's figures from the job's results and the host's cgroup samples (Pod name to
    samples; ``roles`` maps each Pod to driver, executor or broker)."""
    start, end = read_window(job["batches"])
    rows = job["rows"]
    by_role: dict[str, float] = {}
    for pod, series in samples.items():
        if series:
            role = roles[pod]
            by_role[role] = by_role.get(role, 0.0) + cpu_seconds(series, start, end)
    idle = _idle_cpu_per_s(job, samples, roles)
    return {
        "executors": job["executors"],
        "rows": rows,
        "seconds": round(end - start, 3),
        "rate": round(rows / (end - start), 1),
        "batches": len(job["batches"]),
        "cpu_s_per_million": {
            role: round(seconds / rows * 1e6, 3) for role, seconds in sorted(by_role.items())
        },
        "driver_cpu_s_per_million_own": _rounded(per_million(job["driver_cpu_seconds"], rows)),
        "driver_cpu_per_s_reading": _rounded(by_role.get("driver", 0.0) / (end - start)),
        "driver_cpu_per_s_idle": _rounded(idle),
        "registered_seconds": job["registered_seconds"],
    }


def _idle_cpu_per_s(
    job: dict[str, Any], samples: dict[str, list[tuple[float, int]]], roles: dict[str, str]
) -> float | None:
    """The driver's CPU per second in the job's idle window after the query (None without
    one): its background, which a read's driver CPU per message should be compared with."""
    start, end = job.get("idle_started"), job.get("idle_ended")
    drivers = [series for pod, series in samples.items() if roles.get(pod) == "driver" and series]
    if start is None or end is None or end <= start or not drivers:
        return None
    return sum(cpu_seconds(series, start, end) for series in drivers) / (end - start)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians and spreads per executor count, and the 2-over-1 rate ratio paired by round."""
    by_count: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        by_count.setdefault(run["executors"], []).append(run)
    found: dict[str, Any] = {}
    for count, items in sorted(by_count.items()):
        roles = sorted({role for run in items for role in run["cpu_s_per_million"]})
        found[str(count)] = {
            "rate": rounds.summarize([r["rate"] for r in items]).as_dict(),
            "cpu_s_per_million": {
                role: rounds.summarize(
                    [r["cpu_s_per_million"][role] for r in items if role in r["cpu_s_per_million"]]
                ).as_dict()
                for role in roles
            },
        }
    ones = {r["round"]: r["rate"] for r in by_count.get(1, [])}
    twos = {r["round"]: r["rate"] for r in by_count.get(2, [])}
    paired = sorted(set(ones) & set(twos))  # an interrupted round has one of the two
    if paired:
        found["ratio_2_over_1"] = rounds.ratios(
            [twos[i] for i in paired], [ones[i] for i in paired]
        ).as_dict()
    return found


def report_lines(found: dict[str, Any]) -> list[str]:
    lines = []
    for count in ("1", "2"):
        if count not in found:
            continue
        rate = rounds.Spread(**_spread(found[count]["rate"]))
        lines.append(f"{count} executor(s): {rate.text(' msg/s')}")
        for role, spread in found[count]["cpu_s_per_million"].items():
            text = rounds.Spread(**_spread(spread)).text(" CPU s/M msgs", 3)
            lines.append(f"    {role}: {text}")
    if "ratio_2_over_1" in found:
        ratio = rounds.Spread(**_spread(found["ratio_2_over_1"]))
        lines.append(f"2 over 1 executor, paired by round: {ratio.text('x', 2)}")
    return lines


def _spread(item: dict[str, Any]) -> dict[str, Any]:
    return {key: item[key] for key in ("n", "median", "low", "high")}


# --- the cgroup sampler ----------------------------------------------------------------------


def pod_cgroup(root: Path, pod: dict[str, Any]) -> Path | None:
    """The cpuacct cgroup of ``pod`` under kubelet's cgroup root ``root`` (cgroupfs driver:
    ``kubepods[/<qos>]/pod<uid>``): all its containers and its sandbox, which is the one
    container of a Spark Pod (the sandbox's pause process uses next to nothing)."""
    uid = pod.get("metadata", {}).get("uid")
    if not uid:
        return None
    for qos in ("", "burstable", "besteffort"):
        path = root / "kubepods" / qos / f"pod{uid}"
        if (path / "cpuacct.usage").exists():
            return path
    return None


@dataclass
class Sampler:
    """Samples the cpuacct.usage of the broker's and the job's containers every SAMPLE_S,
    finding the job's Pods as they start (``find`` lists them: Pod name to (role, Pod))."""

    root: Path
    find: Callable[[], dict[str, tuple[str, dict[str, Any]]]]
    samples: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    _paths: dict[str, Path] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="cgroup-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        next_listing = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_listing:
                next_listing = now + 1.0
                self._refresh()
            stamp = time.time()
            for name, path in list(self._paths.items()):
                try:
                    usage = int((path / "cpuacct.usage").read_text())
                except (OSError, ValueError):  # the container ended: its last sample stands
                    continue
                self.samples.setdefault(name, []).append((stamp, usage))
            self._stop.wait(SAMPLE_S)

    def _refresh(self) -> None:
        try:
            listed = self.find()
        except Exception as exc:  # noqa: BLE001 - an apiserver hiccup; the next listing retries
            sys.stderr.write(f"  sampler: listing Pods failed: {exc}\n")
            return
        for name, (role, pod) in listed.items():
            if name in self._paths:
                continue
            path = pod_cgroup(self.root, pod)
            if path is not None:
                self._paths[name] = path
                self.roles[name] = role


def set_node_cpu_shares(cpu_root: Path, cgroup_name: str, shares: int) -> int:
    """Gives the node's cgroup root (kubelet's ``cgroupRoot``, this run's own, removed with the
    plane) ``shares`` in the cpu hierarchy; returns what it had. Every host process sits in
    the machine's root cgroup, where each runnable one weighs 1024 against the node's whole
    subtree at 1024: with eight other runnable processes all the Pods together got about a
    fifth of a core, the same pie for one executor or two. 8192 weighs the node as eight
    runnable processes; the Pods' quotas still cap what each of them takes."""
    path = cpu_root / cgroup_name / "cpu.shares"
    before = int(path.read_text())
    path.write_text(f"{shares}\n")
    return before


# --- the node --------------------------------------------------------------------------------


def stream_names(count: int) -> list[str]:
    return [f"bench-stream-{i}" for i in range(count)]


def publish(amqp_url: str, streams: Sequence[str], messages: int, body_size: int) -> int:
    """The streams declared and filled round-robin, every message confirmed."""
    import pika  # noqa: PLC0415
    from hutch_spark import publishing  # noqa: PLC0415

    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        for stream in streams:
            channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    finally:
        connection.close()
    body = b"x" * body_size
    outbound = (
        publishing.Outbound("", streams[n % len(streams)], body, pika.BasicProperties())
        for n in range(messages)
    )
    publisher = publishing.ConfirmedPublisher(
        pika.URLParameters(amqp_url), window=1000, mandatory=True
    )
    return publisher.publish_all(outbound)


def broker_manifest(work: Path, broker_cpu: str) -> Path:
    """examples/broker.yaml with a CPU limit of ``broker_cpu``: the broker's share of the 2
    cores is then capped, not whatever the executors leave. Its request stays the example's
    500m: the node's 2 CPUs must hold the operator's, the broker's, the driver's and two
    executors' requests, or the second executor Pod stays Pending."""
    import yaml  # noqa: PLC0415

    doc = yaml.safe_load((REPO / "examples" / "broker.yaml").read_text())
    doc["spec"]["resources"]["limits"]["cpu"] = broker_cpu
    path = work / "broker.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run_on_node(
    args: argparse.Namespace, work: Path,
    progress: Callable[[dict[str, Any]], object] | None = None,
) -> dict[str, Any]:  # fmt: skip
    with nodesetup.node(NAMESPACE, work) as node:
        from hutch_demo import pods, sparkpods  # noqa: PLC0415

        plane, cluster = node.plane, node.cluster
        manifest = broker_manifest(work, args.broker_cpu)
        endpoint = sparkpods.example_broker(cluster, NAMESPACE, manifest)
        (volume,) = plane.make_local_pvs(1, size="2Gi")  # job files, checkpoints, results
        streams = stream_names(args.streams)
        began = time.monotonic()
        published = publish(endpoint.amqp_url, streams, args.messages, args.body_size)
        publish_s = time.monotonic() - began
        print(f"published {published} confirmed messages to {len(streams)} streams in "
              f"{publish_s:.1f}s", flush=True)  # fmt: skip
        broker_pod = pods.get_pod(cluster, NAMESPACE, BROKER_POD) or {}
        limits = broker_pod["spec"]["containers"][0].get("resources", {})
        found = _rounds(plane, cluster, node.image, volume, streams, args, work, progress)
        found["broker_resources"] = limits
        found["publish_seconds"] = round(publish_s, 1)
        return found


def _rounds(
    plane: Any, cluster: Any, image: str, volume: str, streams: list[str],
    args: argparse.Namespace, work: Path,
    progress: Callable[[dict[str, Any]], object] | None = None,
) -> dict[str, Any]:  # fmt: skip
    from hutch_demo import sparkpods  # noqa: PLC0415

    volume_dir = plane.node_layout.volumes_dir / volume
    job_dir = volume_dir / JOB_DIR
    job_dir.mkdir(parents=True)
    shutil.copy(BENCH / "stream_pods_job.py", job_dir / "stream_pods_job.py")
    os.chmod(job_dir, 0o777)  # noqa: S103 - the image's uid 185 writes results here
    base = sparkpods.prepare(
        plane, cluster, NAMESPACE, work, volume, "2Gi", broker="hutch", queue=",".join(streams),
        credentials_secret=ADMIN_SECRET, image=image, app_name="stream-bench",
    )  # fmt: skip
    env = sparkpods.environment(plane.kubeconfig)
    cgroups = CGROUP_CPUACCT / plane.node_layout.cgroup_name
    shares = None
    if args.node_cpu_shares:
        shares = set_node_cpu_shares(CGROUP_CPU, plane.node_layout.cgroup_name,
                                     args.node_cpu_shares)  # fmt: skip
        print(f"the node's cgroup cpu.shares {shares} -> {args.node_cpu_shares}", flush=True)
    runs: list[dict[str, Any]] = []
    order = rounds.orders(["1", "2"], args.repeat)
    for index, names in enumerate(order):
        for name in names:
            executors = int(name)
            app = f"sb-r{index}-e{executors}"
            load = rounds.load()
            print(f"round {index + 1}/{len(order)}: {executors} executor(s), load "
                  f"{load['loadavg'][0]}", flush=True)  # fmt: skip
            job = _one_run(
                cluster, base, app, executors, streams, args, job_dir, env, cgroups, work
            )
            figures = job | {"round": index, "load": load}
            runs.append(figures)
            if progress is not None:  # an interrupted bench keeps the rounds it finished
                progress(
                    {
                        "runs": runs,
                        "node_cpu_shares": args.node_cpu_shares or "untouched",
                        "node_cpu_shares_before": shares,
                    }
                )
            print(f"  {figures['rate']:,.0f} msg/s over {figures['seconds']}s; CPU s per M "
                  f"messages {figures['cpu_s_per_million']}, driver's own "
                  f"{figures['driver_cpu_s_per_million_own']}; driver CPU/s reading "
                  f"{figures['driver_cpu_per_s_reading']}, idle {figures['driver_cpu_per_s_idle']}",
                  flush=True)  # fmt: skip
            _delete_pods(cluster, app)
    return {
        "runs": runs,
        "node_cpu_shares": args.node_cpu_shares or "untouched",
        "node_cpu_shares_before": shares,
    }


def _delete_pods(cluster: Any, app: str) -> None:
    """The run's ended Pods (executors stay after the driver ends: deleteOnTermination false)."""
    from hutch_demo import pods  # noqa: PLC0415

    names = [
        pod["metadata"]["name"] for pod in pods.list_pods(cluster, NAMESPACE, "spark-role")
        if pod["metadata"]["name"].startswith(f"{app}-")
    ]  # fmt: skip
    if names:
        cluster.kubectl("delete", "pod", "-n", NAMESPACE, *names, "--wait=true",
                        "--timeout=120s", check=False)  # fmt: skip


def _one_run(
    cluster: Any, base: Any, app: str, executors: int, streams: list[str],
    args: argparse.Namespace, job_dir: Path, env: dict[str, str], cgroups: Path, work: Path,
) -> dict[str, Any]:  # fmt: skip
    from hutch_demo import pods, sparkpods  # noqa: PLC0415

    results = job_dir / f"{app}.json"
    sub = submission(base.api_server, str(base.pod_template), base.image, app, executors,
                     streams, args)  # fmt: skip

    def find() -> dict[str, tuple[str, dict[str, Any]]]:
        listed = {BROKER_POD: ("broker", pods.get_pod(cluster, NAMESPACE, BROKER_POD) or {})}
        for pod in pods.list_pods(cluster, NAMESPACE, "spark-role"):
            name = pod["metadata"]["name"]
            if name.startswith(f"{app}-"):  # driver: <app>-driver, executors: <app>-exec-<n>
                listed[name] = (pod["metadata"]["labels"]["spark-role"], pod)
        return listed

    sampler = Sampler(cgroups, find)
    sampler.start()
    log = work / f"spark-submit-{app}.log"
    try:
        submit = sparkpods.start_submit(sub, env, log)
        try:
            submit.wait(timeout=RUN_TIMEOUT_S)
        finally:
            if submit.poll() is None:
                submit.kill()
                submit.wait()
    finally:
        sampler.stop()
    driver = pods.get_pod(cluster, NAMESPACE, sub.driver_pod)
    phase = (driver or {}).get("status", {}).get("phase")
    if submit.returncode != 0 or phase != "Succeeded" or not results.exists():
        pods.save_logs(cluster, NAMESPACE, work / "pod-logs")
        raise RuntimeError(f"run {app}: spark-submit exited {submit.returncode}, driver "
                           f"{phase}:\n{log.read_text()[-3000:]}")  # fmt: skip
    job = json.loads(results.read_text())
    found = run_figures(job, sampler.samples, sampler.roles)
    found["pods"] = [pods.facts(p).line() for _, (_, p) in find().items() if p]
    found["job"] = job
    return found


def submission(
    api_server: str, template: str, image: str, app: str, executors: int,
    streams: Sequence[str], args: argparse.Namespace,
) -> Any:  # fmt: skip
    """docs/spark.md's submission with the benchmark's job from the volume, ``executors``
    executor Pods of ``--executor-cpu`` each (request = limit: a CFS quota, so one executor
    cannot take the CPU a second one would have had), the administrator's credentials on the
    driver and the executors (the bench declared the streams as that user)."""
    from hutch_demo import sparksubmit  # noqa: PLC0415

    mount = f"{sparksubmit.MOUNT}/{JOB_DIR}"
    cpu = args.executor_cpu
    return sparksubmit.Submission(
        api_server=api_server, namespace=NAMESPACE, broker="hutch", queue=",".join(streams),
        credentials_secret=ADMIN_SECRET, claim="spark-data", pod_template=Path(template),
        image=image, app_name=app, executors=executors,
        job_file=f"local://{mount}/stream_pods_job.py",
        extra_confs={
            **sparksubmit.executor_credentials(ADMIN_SECRET),
            "spark.kubernetes.executor.request.cores": cpu,
            "spark.kubernetes.executor.limit.cores": cpu,
            **args.conf,
        },
        arguments=(
            "--streams", ",".join(streams), "--messages", str(args.messages),
            "--executors", str(executors), "--partitions", str(args.partitions),
            "--max-per-trigger", str(args.max_per_trigger), "--warm-up", str(args.warm_up),
            "--checkpoint", f"{mount}/checkpoints/{app}", "--output", f"{mount}/{app}.json",
        ),
    )  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="over all streams")
    parser.add_argument("--body-size", type=int, default=200)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=2, help="slices per stream per batch")
    parser.add_argument("--max-per-trigger", type=int, default=250_000)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of 1 and 2 executors")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=None,
        help="offsets per stream the job reads before its clock runs (a batch read); "
        "default 2000, or what a stream holds if less",
    )
    parser.add_argument("--executor-cpu", default="0.4", help="each executor's request = limit")
    parser.add_argument("--broker-cpu", default="1", help="the broker's request = limit")
    parser.add_argument("--node-cpu-shares", type=int, default=8192,
                        help="the node cgroup's cpu.shares (0: the plane's 1024)")  # fmt: skip
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="one more spark-submit --conf, e.g. executor JVM options")  # fmt: skip
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    confs = [text.partition("=") for text in args.conf]
    if any(not key.startswith("spark.") or not sep for key, sep, _ in confs):
        parser.error("--conf takes spark.KEY=VALUE")
    args.conf = {key: value for key, _, value in confs}
    if args.node_cpu_shares and not 2 <= args.node_cpu_shares <= 262144:
        parser.error("--node-cpu-shares must be 0 or 2-262144 (the kernel's range)")
    if args.messages < 1 or args.streams < 1 or args.repeat < 1 or args.partitions < 1:
        parser.error("--messages, --streams, --partitions and --repeat must be at least 1")
    if args.warm_up is None:
        args.warm_up = min(2_000, max(args.messages // args.streams, 1))
    if not 1 <= args.warm_up <= args.messages // args.streams:
        parser.error("--warm-up must be 1 to the messages a stream holds (--messages / --streams)")
    return args


def main() -> None:
    args = parse_args()
    # Started in the background by a shell, SIGINT is ignored; a Ctrl-C or kill -INT must still
    # stop the rounds and run the cleanups (operator uninstall, the plane's stop).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    load_before = rounds.load()
    machine = machineinfo.facts()  # before the plane starts: the machine as the rounds find it
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    output = args.output or BENCH / "results" / f"stream-pods-{stamp}.json"

    def finish(found: dict[str, Any]) -> None:
        found["summary"] = summary(found["runs"]) if found["runs"] else {}
        found["arguments"] = {k: str(v) for k, v in vars(args).items()}
        found["cpus"] = os.cpu_count()
        found.update(machine)
        found["machine_load"] = rounds.busiest([{"load": load_before}, *found["runs"]])
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(found, indent=2))

    with tempfile.TemporaryDirectory(prefix="hutch-stream-pods-bench-") as scratch:
        found = run_on_node(args, Path(scratch), finish)
    finish(found)
    print("\n".join(report_lines(found["summary"])))
    print(found["machine_load"])
    print(f"results: {output}")


if __name__ == "__main__":
    main()
