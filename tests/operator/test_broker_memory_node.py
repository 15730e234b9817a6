"""Bounded recovery memory on the real node: a 256Mi Broker restarts with 600 MiB on disk.

Why a real node: the failure this guards against was seen only there. A Broker with a 256Mi
memory request and limit, holding 300 MiB of confirmed persistent messages, was OOM-killed by
its container's cgroup 2 s after every start (CrashLoopBackOff): start-up loaded every body.
Recovery now keeps an index and leaves the bodies on disk (docs/isolation/recovery.md). Here
the operator builds the Pod (its startup probe, its watermark from the memory request), the
kernel enforces the limit, and the kubelet records any OOM kill (``lastState``, the cgroup's
``oom_kill`` count), so nothing can pretend.

The Broker gets 1,200 confirmed persistent 512 KiB messages (600 MiB, several times its 256Mi),
is restarted twice (``kubectl delete pod``, then ``kill -9`` of the broker from the host, which
makes the kubelet restart the container in place), and must come back Ready each time without
an OOM kill. A consumer must then receive every message intact (each body carries its sequence
number and the SHA-256 of the rest) and in publish order. The broker process's peak resident set
(``VmHWM`` from the host's ``/proc``) and the container cgroup's figures are printed.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pika
import pytest
from hutch_demo import waiting
from hutch_operator.instances import memory
from hutch_testing import brokerpods

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

LIMIT = "256Mi"
LIMIT_BYTES = 256 * 1024 * 1024
MESSAGES = 1200
BODY_SIZE = 512 * 1024
DATA_BYTES = MESSAGES * BODY_SIZE  # 600 MiB: 2.3 times the memory limit
HEAD = struct.Struct(">Q32s")  # sequence number, SHA-256 of the payload
PERSISTENT = pika.BasicProperties(delivery_mode=2)
QUEUE = "bulk"
BLOCK_TIMEOUT = 60.0  # a publisher blocked this long counts as blocked for good


def broker_spec() -> dict[str, Any]:
    """Request = limit 256Mi (Guaranteed QoS); a local PV with room for the data twice over."""
    return {
        "resources": {
            "requests": {"cpu": "100m", "memory": LIMIT},
            "limits": {"memory": LIMIT},
        },
        "persistence": {"size": "2Gi", "storageClassName": "hutch-test"},
        "memoryHighWatermark": 0.4,
        "terminationGracePeriodSeconds": 10,
    }


def make_body(number: int) -> bytes:
    payload = os.urandom(BODY_SIZE - HEAD.size)
    return HEAD.pack(number, hashlib.sha256(payload).digest()) + payload


def check_body(body: bytes) -> int:
    """The body's sequence number, once its checksum and size hold."""
    assert len(body) == BODY_SIZE, len(body)
    number, digest = HEAD.unpack_from(body)
    assert hashlib.sha256(body[HEAD.size :]).digest() == digest, f"message {number} damaged"
    return int(number)


def connect(broker: brokerpods.BrokerPod) -> pika.BlockingConnection:
    """Like ``BrokerPod.connect``, but a connection blocked for ``BLOCK_TIMEOUT`` fails."""
    params = pika.ConnectionParameters(
        broker.host,
        5672,
        credentials=pika.PlainCredentials(broker.user, broker.password),
        connection_attempts=30,
        retry_delay=1,
        blocked_connection_timeout=BLOCK_TIMEOUT,
    )
    return pika.BlockingConnection(params)


def publish_all(broker: brokerpods.BrokerPod) -> list[tuple[str, float]]:
    """Every message, persistent, each confirmed before the next; the blocked/unblocked events
    the connection saw (pika raises ConnectionBlockedTimeout after ``BLOCK_TIMEOUT``)."""
    events: list[tuple[str, float]] = []
    with connect(broker) as connection:
        impl = connection._impl  # events while basic_publish waits, not only between calls
        impl.add_on_connection_blocked_callback(
            lambda _c, _f: events.append(("blocked", time.monotonic()))
        )
        impl.add_on_connection_unblocked_callback(
            lambda _c, _f: events.append(("unblocked", time.monotonic()))
        )
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(QUEUE, durable=True)
        for number in range(MESSAGES):
            channel.basic_publish("", QUEUE, make_body(number), PERSISTENT, mandatory=True)
    return events


def queue_length(broker: brokerpods.BrokerPod) -> int:
    with broker.connect() as connection:
        declared = connection.channel().queue_declare(QUEUE, durable=True, passive=True)
    return int(declared.method.message_count)


def drain_in_order(broker: brokerpods.BrokerPod) -> int:
    """Consumes every message (prefetch 16, acked one by one), checking each body and the
    order; returns how many came."""
    expected = 0
    with connect(broker) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=16)
        for method, _props, body in channel.consume(QUEUE, inactivity_timeout=10):
            if method is None:  # nothing for 10 s: the queue is empty or stuck
                break
            number = check_body(body)
            assert number == expected, f"got message {number} where {expected} was due"
            channel.basic_ack(method.delivery_tag)
            expected += 1
            if expected == MESSAGES:
                break
        channel.cancel()
    return expected


def oom_killed(status: dict[str, Any]) -> bool:
    return any(
        status.get(key, {}).get("terminated", {}).get("reason") == "OOMKilled"
        for key in ("state", "lastState")
    )


def wait_ready_or_fail_on_oom(
    broker: brokerpods.BrokerPod, *, not_uid: str = "", restarts: int = 0
) -> dict[str, Any]:
    """``BrokerPod.wait_ready``, but an OOM kill (or a restart beyond ``restarts``) fails at
    once instead of waiting out the crash loop."""

    def ready() -> dict[str, Any] | None:
        pod = broker.current()
        if not pod or pod["metadata"]["uid"] == not_uid:
            return None
        status = (pod.get("status", {}).get("containerStatuses") or [{}])[0]
        assert not oom_killed(status), f"the broker was OOM-killed: {status}"
        assert status.get("restartCount", 0) <= restarts, f"unexpected restart: {status}"
        if status.get("restartCount", 0) < restarts or not status.get("ready"):
            return None
        return pod

    broker.pod = waiting.wait_for(
        ready, timeout=brokerpods.READY_TIMEOUT, interval=0.2, what=f"{broker.pod_path} Ready"
    )
    return broker.pod


def peak_rss(broker: brokerpods.BrokerPod) -> int:
    """The broker process's peak resident set (VmHWM), read on the host: it covers recovery,
    since the Pod is Ready only once the broker listens, after recovery."""
    pids = (broker.cgroup() / "cgroup.procs").read_text().split()
    peaks = []
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) * 1024)
    assert peaks, f"no process in {broker.cgroup()}"
    return max(peaks)


def cgroup_figures(cgroup: Path) -> dict[str, int]:
    """v1 memory figures: the peak charge (page cache included), the resident anonymous memory
    now (``total_rss``), and how often the charge hit the limit (``failcnt``, reclaim)."""
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    return {
        "max_usage": int((cgroup / "memory.max_usage_in_bytes").read_text()),
        "rss": int(stat["total_rss"]),
        "failcnt": int((cgroup / "memory.failcnt").read_text()),
    }


def mib(value: int) -> str:
    return f"{value / 2**20:.0f} MiB"


def test_a_256mi_broker_restarts_with_600mib_on_disk_and_drains_everything(
    node_operator: Any, make_local_pvs: Any, kit: Any
) -> None:
    spec = broker_spec()
    watermark = memory.watermark(spec["resources"], spec["memoryHighWatermark"])
    make_local_pvs(1, size=spec["persistence"]["size"])
    assert memory.quantity_bytes(spec["persistence"]["size"]) >= 2 * DATA_BYTES
    kube = kit.Kube(node_operator, node_operator.create_namespace())
    kube.create("Broker", "brokers", "bulk", spec)
    broker = brokerpods.BrokerPod(node_operator, kube.namespace, "bulk").attach()
    assert int((broker.cgroup() / "memory.limit_in_bytes").read_text()) == LIMIT_BYTES
    assert broker.node_info()["mem_limit"] == watermark.high_watermark_bytes
    startup = broker.pod["spec"]["containers"][0]["startupProbe"]
    probe_budget = startup["periodSeconds"] * startup["failureThreshold"]

    started = time.monotonic()
    blocks = publish_all(broker)
    published = time.monotonic() - started
    assert queue_length(broker) == MESSAGES
    running = cgroup_figures(broker.cgroup())
    running_peak = peak_rss(broker)

    # Restart 1: kubectl delete pod; the StatefulSet makes a new Pod on the same PV.
    first_uid = broker.pod["metadata"]["uid"]
    started = time.monotonic()
    broker.plane.kubectl("delete", "pod", "-n", broker.namespace, f"{broker.name}-server-0")
    wait_ready_or_fail_on_oom(broker, not_uid=first_uid)
    after_delete = time.monotonic() - started
    delete_peak = peak_rss(broker)
    delete_cgroup = cgroup_figures(broker.cgroup())
    assert queue_length(broker) == MESSAGES

    # Restart 2: kill -9 from the host; the kubelet restarts the container in the same Pod.
    before = broker.container_status()
    pod_uid = broker.pod["metadata"]["uid"]
    broker.kill_broker()
    started = time.monotonic()
    after = wait_ready_or_fail_on_oom(broker, restarts=before["restartCount"] + 1)
    after_kill = time.monotonic() - started
    assert after["metadata"]["uid"] == pod_uid, "the Pod was replaced"
    restarted = after["status"]["containerStatuses"][0]
    assert restarted["containerID"] != before["containerID"]
    assert restarted["lastState"]["terminated"]["exitCode"] == 137, restarted["lastState"]
    kill_peak = peak_rss(broker)

    drained = drain_in_order(broker)
    assert drained == MESSAGES, f"{MESSAGES - drained} messages never came"
    assert queue_length(broker) == 0
    drain_peak = peak_rss(broker)
    drain_cgroup = cgroup_figures(broker.cgroup())

    final = broker.container_status()
    assert final["restartCount"] == restarted["restartCount"] == 1, final
    assert final["containerID"] == restarted["containerID"], final
    assert not oom_killed(final), final
    assert brokerpods.oom_kills(broker.pod_cgroup()) == 0
    # Recovery holds no body: the peak stays under the watermark, far from the limit (before
    # the change it passed the limit 2 s into start-up, and the kernel killed the broker).
    assert max(delete_peak, kill_peak, drain_peak) < (watermark.high_watermark_bytes or 0)
    # Reading the data once fits the startup probe's budget with room to spare.
    assert max(after_delete, after_kill) < probe_budget / 3, (after_delete, after_kill)

    # To the real stdout: KopfRunner (click's CliRunner) swaps sys.stdout while it runs.
    print(
        f"\nrecovery on the node: {MESSAGES} x {BODY_SIZE // 1024} KiB = {mib(DATA_BYTES)}, "
        f"limit {LIMIT}, watermark {mib(watermark.high_watermark_bytes or 0)}\n"
        f"  publish {published:.1f}s, connection.blocked events {len(blocks)}; running broker "
        f"VmHWM {mib(running_peak)}, cgroup {running}\n"
        f"  kubectl delete pod -> Ready {after_delete:.1f}s, VmHWM {mib(delete_peak)}, "
        f"cgroup {delete_cgroup}\n"
        f"  kill -9 -> Ready {after_kill:.1f}s (startup probe budget {probe_budget}s), "
        f"VmHWM {mib(kill_peak)}\n"
        f"  drained {drained} in order, VmHWM {mib(drain_peak)}, cgroup {drain_cgroup}",
        file=sys.__stdout__,
        flush=True,
    )
