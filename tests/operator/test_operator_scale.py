"""The operator's cost does not grow with its objects once they are settled (case 7).

A real kube-apiserver, a real hutch-broker on loopback and the operator as a child process
(as test_recovery.py runs it) with a 2 s drift sweep. Its own metrics say what it holds and
does: ``hutch_operator_asyncio_tasks`` (tasks on its event loop), the sweep's list calls and
status writes, and its requests to the broker. Per-object Kopf timers made the task count grow
by one per object (200 Queues: 200 more tasks waking every period); the bulk sweep keeps it
flat, lists the broker once per (broker, kind, vhost) per period, and writes nothing when
nothing changed.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import ports
from hutch_testing.brokers import HutchBroker

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
BROKER = "hutch"
SWEEP = 2.0


@contextlib.contextmanager
def operator(plane: Any, kube: Any, broker: HutchBroker, log: Path) -> Iterator[int]:
    port = ports.free_port()
    environment = {
        **os.environ, "KUBECONFIG": str(plane.kubeconfig), "HUTCH_BROKER_STATUS_PERIOD": "30",
        "HUTCH_METRICS_PORT": str(port), "HUTCH_SYNC_PERIOD": str(SWEEP),
        "HUTCH_BROKER_ADDRESSES": f"{kube.namespace}/{BROKER}={broker.http_url}|{broker.amqp_url}",
        "PYTHONPATH": str(REPO / "operator"),
    }  # fmt: skip
    with log.open("ab") as out:
        child = subprocess.Popen(
            # Only this namespace: objects other modules left on the shared plane are not ours
            # to count (they may point at the session's RabbitMQ).
            [sys.executable, "-m", "hutch_operator", "--standalone", "--namespace", kube.namespace],
            env=environment, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield port
    finally:
        child.terminate()
        try:
            child.wait(20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def metric(port: int, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{name}(?:\{{([^}}]*)\}})? (\S+)$", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total += float(match.group(2))
    return total


def all_ready(kube: Any, count: int) -> bool:
    _, reply = kube.plane.api("GET", kube.path("queues"))
    items = reply.get("items", [])
    ready = [o for o in items if any(c.get("type") == "Ready" and c.get("status") == "True"
                                     for c in o.get("status", {}).get("conditions", []))]  # fmt: skip
    return len(items) == count and len(ready) == count


def settled_tasks(port: int) -> float:
    """The task count once Kopf's per-object workers have idled out (0.3 s after their last
    event): the least of a few samples over one sweep period."""
    samples = []
    for _ in range(6):
        samples.append(metric(port, "hutch_operator_asyncio_tasks"))
        time.sleep(SWEEP / 4)
    return min(samples)


def create_queues(kube: Any, first: int, last: int) -> None:
    for i in range(first, last):
        kube.create("Queue", "queues", f"q{i:04d}", {"brokerRef": {"name": BROKER}})


def test_tasks_and_sweep_calls_do_not_grow_with_the_objects(
    crds_applied: Any, kit: Any, tmp_path: Path
) -> None:
    plane = crds_applied
    broker = HutchBroker(work_dir=tmp_path / "hutch").start()
    kube = kit.Kube(plane, plane.create_namespace())
    kube.secret(f"{BROKER}-default-user", {"username": "guest", "password": "guest"})
    kube.create("Broker", "brokers", BROKER, {"persistence": {"size": "0"}})
    try:
        with operator(plane, kube, broker, tmp_path / "operator.log") as port:
            kit.wait_for(lambda: kit.ready(kube.get("brokers", BROKER), "Available")[0] == "True",
                         60, "Broker Available")  # fmt: skip
            create_queues(kube, 0, 10)
            kit.wait_for(lambda: all_ready(kube, 10), 60, "10 Queues Ready")
            time.sleep(SWEEP + 1)  # one sweep pass over them, workers idle
            few = settled_tasks(port)

            create_queues(kube, 10, 200)
            kit.wait_for(lambda: all_ready(kube, 200), 120, "200 Queues Ready")
            time.sleep(SWEEP + 1)
            many = settled_tasks(port)

            # A quiet stretch: every pass over the 200 settled Queues is one list call and
            # writes nothing, to the broker or to Kubernetes.
            lists = metric(port, "hutch_sweep_list_seconds_count", kind="queue")
            judged = metric(port, "hutch_sweep_objects_total", kind="Queue")
            status = metric(port, "hutch_sweep_status_writes_total")
            requests = metric(port, "hutch_broker_requests_total")
            writes = metric(port, "hutch_broker_requests_total", method="PUT")
            time.sleep(3 * SWEEP)
            lists = metric(port, "hutch_sweep_list_seconds_count", kind="queue") - lists
            judged = metric(port, "hutch_sweep_objects_total", kind="Queue") - judged
            status = metric(port, "hutch_sweep_status_writes_total") - status
            requests = metric(port, "hutch_broker_requests_total") - requests
            writes = metric(port, "hutch_broker_requests_total", method="PUT") - writes
    finally:
        broker.stop()

    assert many - few < 20, f"{few} tasks with 10 Queues, {many} with 200"
    assert 2 <= lists <= 5, lists  # about one pass per period, one list call each
    assert judged >= 2 * 200, judged  # the passes did look at every Queue
    assert status == 0
    assert writes == 0
    # The list calls, and at most one pass of the Broker's own status timer (every 30 s).
    assert requests - lists <= 4, (requests, lists)
