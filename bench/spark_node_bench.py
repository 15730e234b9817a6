"""The Spark source benchmark with the driver in a Pod on the real node, beside local mode.

Why: bench/spark_bench.py measures the `hutch` source with the driver on this host in Spark's
local mode. Users run it as a driver Pod and executor Pods against a Broker Pod, where the
driver reads through a Service and the node's bridge, the executors are separate JVMs in their
own containers, and every process shares the node's cores with the broker. This script measures
that: it starts the local plane's node tier, installs the operator with `helm install`, runs
examples/broker.yaml's Broker as a Pod, then submits bench/spark_node_job.py with the very
spark-submit command docs/spark.md shows (``hutch_demo.sparksubmit``: a driver Pod, two
executor Pods, the Broker's Secret by ``secretKeyRef``), the job's files and results on a local
PV this host reads back. The job runs the same phases as local mode (bench/spark_phases.py):
plain pika consumer, source throughput, latency at a 200 ms trigger; a discarded warm-up, then
``--repeat`` rounds. RabbitMQ has no image here, so the node run measures hutch-broker only;
the local run gives the side-by-side ratio. A benchmark, not a test: nothing here runs in CI.

    python bench/spark_node_bench.py [--messages 50000] [--repeat 3] [--latency-seconds 20]

Needs the node tier's binaries (make k8s-bins) and the hutch-spark image (built on first use).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import nodesetup
import rounds
from spark_phases import add_arguments, report_lines, summary

BENCH = Path(__file__).resolve().parent
nodesetup.node_packages()  # a plain checkout: the demo and localkube packages made importable
from hutch_demo import pods, sparkpods, sparksubmit  # noqa: E402

NAMESPACE = "spark-bench"
JOB_FILES = ("spark_node_job.py", "spark_phases.py", "rounds.py")
JOB_DIR = "bench"  # on the volume, mounted at sparksubmit.MOUNT in the Pods
TIMEOUT_S = 3600
# The Broker's administrator, not examples/spark-user.yaml's read-only User: the job declares,
# fills and deletes its own queues (bench-*), which that User may not.
ADMIN_SECRET = "hutch-default-user"  # noqa: S105 - a Secret's name, no password


def job_command(sub: sparksubmit.Submission, args: argparse.Namespace) -> list[str]:
    """docs/spark.md's spark-submit command with the benchmark job instead of windowed_counts."""
    command = sparksubmit.command(sub, str(sparkpods.SPARK_SUBMIT))
    mount = f"{sparksubmit.MOUNT}/{JOB_DIR}"
    return [
        *command[: command.index(sparksubmit.JOB_FILE)],
        f"local://{mount}/spark_node_job.py",
        *("--messages", str(args.messages)),
        *("--repeat", str(args.repeat)),
        *("--latency-seconds", str(args.latency_seconds)),
        *("--latency-rate", str(args.latency_rate)),
        *("--partitions", str(args.partitions)),
        *(("--warm-up", str(args.warm_up)) if args.warm_up is not None else ()),
        *("--output", f"{mount}/results.json"),
    ]


def run_on_node(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Plane, operator, Broker Pod, then the job; returns the job's results.json."""
    with nodesetup.node(NAMESPACE, work) as node:
        sparkpods.example_broker(node.cluster, NAMESPACE)
        # The job's PV only now that the Broker's claim is bound: made earlier, it was a
        # second Available 2Gi PV, and the Broker's claim could bind to it instead, leaving
        # the job's claim (which names it) Pending for ever.
        (volume,) = node.plane.make_local_pvs(1, size="2Gi")  # job files, checkpoints, results
        return _submit(node.plane, node.cluster, node.image, volume, args, work)


def _submit(
    plane: Any, cluster: Any, image: str, volume: str, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    volume_dir = plane.node_layout.volumes_dir / volume
    job_dir = volume_dir / JOB_DIR
    job_dir.mkdir(parents=True)
    for name in JOB_FILES:
        shutil.copy(BENCH / name, job_dir / name)
    # The image runs as uid 185 and writes its results here; a scratch PV of this run only.
    os.chmod(job_dir, 0o777)  # noqa: S103
    sub = sparkpods.prepare(
        plane, cluster, NAMESPACE, work, volume, "2Gi", broker="hutch", queue="unused",
        credentials_secret=ADMIN_SECRET, image=image, app_name="spark-bench",
    )  # fmt: skip
    log_path = work / "spark-submit.log"
    print(f"spark-submit (log: {log_path})", flush=True)
    with log_path.open("w") as log:
        submit = subprocess.Popen(
            job_command(sub, args),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=sparkpods.environment(plane.kubeconfig),
        )
    progress = job_dir / "progress.txt"
    shown = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while submit.poll() is None and time.monotonic() < deadline:
            lines = progress.read_text().splitlines() if progress.exists() else []
            for line in lines[shown:]:
                print(f"  driver Pod: {line}", flush=True)
            shown = len(lines)
            time.sleep(2)
    finally:
        if submit.poll() is None:
            submit.kill()
    results = job_dir / "results.json"
    if submit.wait() != 0 or not results.exists():
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"the benchmark job failed (spark-submit exit {submit.returncode}):\n"
                           f"{tail}")  # fmt: skip
    facts = [pods.facts(pod) for pod in pods.list_pods(cluster, NAMESPACE, "spark-role")]
    found = json.loads(results.read_text())
    found["pods"] = [fact.line() for fact in facts]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args()
    load_before = rounds.load()
    with tempfile.TemporaryDirectory(prefix="hutch-spark-node-bench-") as scratch:
        results = run_on_node(args, Path(scratch))
    stats = summary(results["samples"])
    results["summary"] = stats
    results["cpus"] = os.cpu_count()
    results["machine_load"] = rounds.busiest([{"load": load_before}, *results["samples"]])
    print("\n".join(report_lines("hutch, driver Pod", stats)))
    print("\n".join(f"  {line}" for line in results["pods"]))
    print(results["machine_load"])
    rounds.write_results(results, args.output, "spark-node")


if __name__ == "__main__":
    main()
