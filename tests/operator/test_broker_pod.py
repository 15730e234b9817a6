"""Broker Pods on the real node: durability across Pod loss and memory pressure in the cgroup.

Why: on kwok a Broker's Pod runs nowhere, so nothing said whether a confirmed message survives
its Pod being deleted or its process being killed, or whether the memory watermark keeps the
container clear of its own cgroup's OOM killer. Here the operator runs in the test process
against the node tier (docs/real-node.md), each Broker becomes a StatefulSet Pod with a local
PV on ``hutch-node``, pika reaches it from the host through the broker Service's ClusterIP, and
the host reads the container's cgroup and kills the broker from outside (``brokerpods``).

The memory-pressure test once failed in 3 of 10 runs, for two reasons outside the broker: the
node's kube-proxy left conntrack-INVALID replies un-NATed, so the host reset the flood's
connection through the ClusterIP (now ``conntrack.tcpBeLiberal``, hutch_localkube.realnode), and
pika's BlockingConnection hands ``connection.blocked`` to its callbacks only between publishes,
never while ``basic_publish`` waits on a full socket (the flood listens on the I/O layer).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import pika
import pytest
from hutch_demo import waiting
from hutch_operator.instances import memory
from hutch_testing import brokerpods

pytestmark = pytest.mark.timeout(600)

PERSISTENT = pika.BasicProperties(delivery_mode=2)

log = logging.getLogger(__name__)


def broker_spec(memory_size: str) -> dict[str, Any]:
    """Request = limit (Guaranteed QoS, as the docs advise), a local PV, a short grace period."""
    return {
        "resources": {
            "requests": {"cpu": "100m", "memory": memory_size},
            "limits": {"memory": memory_size},
        },
        "persistence": {"size": "1Gi", "storageClassName": "hutch-test"},
        "memoryHighWatermark": 0.4,
        "terminationGracePeriodSeconds": 10,
    }


@pytest.fixture
def make_broker(node_operator: Any, make_local_pvs: Any, kit: Any) -> Any:
    """``make_broker(name, spec)``: a Broker in a fresh namespace, once its Pod is Ready."""

    def make(name: str, spec: dict[str, Any]) -> brokerpods.BrokerPod:
        make_local_pvs(1, size=spec["persistence"]["size"])
        kube = kit.Kube(node_operator, node_operator.create_namespace())
        kube.create("Broker", "brokers", name, spec)
        return brokerpods.BrokerPod(node_operator, kube.namespace, name).attach()

    return make


# -- durability: kubectl delete pod, then kill -9 ------------------------------------------------


def publish_confirmed(broker: brokerpods.BrokerPod, queue: str, count: int) -> set[int]:
    """``count`` persistent messages numbered 0.., each confirmed by the broker."""
    with broker.connect() as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for number in range(count):
            channel.basic_publish("", queue, str(number).encode(), PERSISTENT)
    return set(range(count))


@dataclass(frozen=True)
class Delivery:
    number: int
    tag: int
    redelivered: bool


class Holder:
    """A consumer that acks only when told, so the test knows which messages were acked,
    which acks were still in flight, and which deliveries were held unacked."""

    def __init__(self, broker: brokerpods.BrokerPod, queue: str, prefetch: int) -> None:
        self.connection = broker.connect()
        self.channel = self.connection.channel()
        self.channel.basic_qos(prefetch_count=prefetch)
        self.deliveries: list[Delivery] = []
        self.channel.basic_consume(queue, self._on_message)

    def _on_message(self, _channel: Any, method: Any, _props: Any, body: bytes) -> None:
        self.deliveries.append(Delivery(int(body), method.delivery_tag, method.redelivered))

    def take(self, count: int, timeout: float = 30) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while len(self.deliveries) < count and time.monotonic() < deadline:
            self.connection.process_data_events(0.1)
        assert len(self.deliveries) >= count, (len(self.deliveries), count)
        return self.deliveries[:count]

    def ack(self, deliveries: list[Delivery]) -> set[int]:
        for delivery in deliveries:
            self.channel.basic_ack(delivery.tag)
        return {d.number for d in deliveries}

    def settle(self) -> None:
        """Makes the acks sent so far durable. A persistent publish on a second channel of this
        connection is processed after them, and its confirm comes only after a store sync that
        began after it (the group commit, dispatch/commits.py), a sync that wrote the acks."""
        marker = self.connection.channel()
        marker.confirm_delivery()
        marker.queue_declare("settle-marker", durable=True)
        marker.basic_publish("", "settle-marker", b"", PERSISTENT)

    def abandon(self) -> None:
        with contextlib.suppress(Exception):  # the broker is gone or going
            self.connection.close()


class Trickle(threading.Thread):
    """Publishes confirmed persistent messages numbered from ``first``, one at a time, until
    its connection dies: so the broker is killed with confirms just released and one publish
    in flight. Only ``confirmed`` numbers are promised; the last of ``attempted`` may be lost."""

    def __init__(self, broker: brokerpods.BrokerPod, queue: str, first: int) -> None:
        super().__init__(name="trickle", daemon=True)
        self.connection = broker.connect()
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()
        self.queue, self.next = queue, first
        self.attempted: set[int] = set()
        self.confirmed: set[int] = set()

    def run(self) -> None:
        with contextlib.suppress(pika.exceptions.AMQPError):  # the kill ends the stream
            while True:
                self.attempted.add(self.next)
                self.channel.basic_publish("", self.queue, str(self.next).encode(), PERSISTENT)
                self.confirmed.add(self.next)
                self.next += 1


def read_all(broker: brokerpods.BrokerPod, queue: str) -> Holder:
    """After a restart: a consumer holding every message of the queue, none acked."""
    with broker.connect() as connection:
        declared = connection.channel().queue_declare(queue, durable=True, passive=True)
    holder = Holder(broker, queue, prefetch=0)
    holder.take(declared.method.message_count)
    holder.connection.process_data_events(0.3)  # and nothing beyond the count arrives
    return holder


def check_recovered(
    found: list[Delivery], *, before: set[int], acked: set[int], in_flight: set[int],
    delivered: set[int],
) -> None:  # fmt: skip
    """The queue after a restart against what the clients know happened before it: acked
    messages gone, every other confirmed message there once (an ack in flight may have landed
    or not), in publish order, flagged redelivered if it had been delivered."""
    numbers = [d.number for d in found]
    assert len(numbers) == len(set(numbers)), "a message is in the queue twice"
    present = set(numbers)
    assert present <= before, f"unknown messages: {sorted(present - before)[:10]}"
    assert not present & acked, f"acked messages came back: {sorted(present & acked)[:10]}"
    missing = before - acked - in_flight - present
    assert not missing, f"{len(missing)} confirmed messages lost: {sorted(missing)[:10]}"
    assert numbers == sorted(numbers), "the recovered queue is out of publish order"
    unflagged = [d.number for d in found if d.number in delivered and not d.redelivered]
    assert not unflagged, f"delivered before the restart, not flagged redelivered: {unflagged[:10]}"


def test_confirmed_messages_survive_pod_delete_and_kill_9_with_a_consumer_mid_stream(
    make_broker: Any,
) -> None:
    broker = make_broker("durable", broker_spec("256Mi"))
    queue = "orders"
    started = time.monotonic()
    everything = publish_confirmed(broker, queue, 2000)
    published = time.monotonic()

    # Round 1: delete the Pod (the API call kubectl delete pod makes), a consumer mid-stream.
    holder = Holder(broker, queue, prefetch=400)
    taken = holder.take(400)
    acked = holder.ack(taken[:150])
    holder.settle()
    in_flight = holder.ack(taken[150:200])  # sent with no round trip behind them
    first = broker.pod
    status, _ = broker.plane.api("DELETE", broker.pod_path)
    assert status == 200
    holder.abandon()
    second = broker.wait_ready(not_uid=first["metadata"]["uid"])
    claims = [v["persistentVolumeClaim"]["claimName"] for v in second["spec"]["volumes"]
              if "persistentVolumeClaim" in v]  # fmt: skip
    assert claims == [f"data-{broker.name}-server-0"]
    holder = read_all(broker, queue)
    check_recovered(
        holder.deliveries, before=everything, acked=acked, in_flight=in_flight,
        delivered={d.number for d in taken},
    )  # fmt: skip
    remaining = {d.number for d in holder.deliveries}
    deleted = time.monotonic()

    # Round 2: kill -9 of the broker from the host; the kubelet restarts the container.
    held = holder.deliveries
    acked = holder.ack(held[:300])
    holder.settle()
    in_flight = holder.ack(held[300:350])
    before = broker.container_status()
    trickle = Trickle(broker, queue, first=100_000)
    trickle.start()
    waiting.wait_for(lambda: len(trickle.confirmed) >= 50, timeout=30, what="50 confirms")
    killed = broker.kill_broker()
    trickle.join(timeout=30)
    holder.abandon()
    after = broker.wait_ready(restarts=before["restartCount"] + 1)
    assert after["metadata"]["uid"] == second["metadata"]["uid"], "the Pod was replaced"
    restarted = after["status"]["containerStatuses"][0]
    assert restarted["containerID"] != before["containerID"]
    assert restarted["lastState"]["terminated"]["exitCode"] == 137, restarted["lastState"]
    holder = read_all(broker, queue)
    check_recovered(
        holder.deliveries, before=remaining | trickle.attempted, acked=acked,
        in_flight=in_flight | (trickle.attempted - trickle.confirmed), delivered=remaining,
    )  # fmt: skip
    holder.abandon()
    log.info(
        "durability: publish 2000 %.1fs, delete round %.1fs, kill -9 round %.1fs (pid %s, "
        "%d confirmed by the trickle), in queue after each: %d, %d",
        published - started, deleted - published, time.monotonic() - deleted, killed,
        len(trickle.confirmed), len(remaining), len(holder.deliveries),
    )  # fmt: skip


# -- memory pressure inside the Pod's cgroup ------------------------------------------------------


class Flood(threading.Thread):
    """A publisher that never waits: 64 KiB persistent messages round-robin into durable
    queues, as fast as the broker reads them. When the broker blocks the connection its
    socket fills and ``basic_publish`` waits, as a real publisher's would. On ``stop`` it
    publishes one last message with a confirm, which can only return once it is unblocked."""

    def __init__(self, broker: brokerpods.BrokerPod, queues: list[str]) -> None:
        super().__init__(name="flood", daemon=True)
        self.connection = broker.connect()
        self.queues = queues
        self.events: list[tuple[str, float, str]] = []
        self.sent = 0
        self.confirmed_last = False
        self.error: Exception | None = None
        self.stop = threading.Event()
        # On the connection's I/O layer, not BlockingConnection: that one hands these events
        # out only in process_data_events, never while basic_publish waits for a full socket
        # to drain, which is exactly where a blocked publisher sits.
        impl = self.connection._impl
        impl.add_on_connection_blocked_callback(self._on_blocked)
        impl.add_on_connection_unblocked_callback(self._on_unblocked)
        channel = self.connection.channel()
        for queue in queues:
            channel.queue_declare(queue, durable=True)
        self.channel = channel

    def _on_blocked(self, _connection: Any, frame: Any) -> None:
        self.events.append(("blocked", time.monotonic(), frame.method.reason))

    def _on_unblocked(self, _connection: Any, _frame: Any) -> None:
        self.events.append(("unblocked", time.monotonic(), ""))

    def run(self) -> None:
        try:
            self._flood()
        except pika.exceptions.AMQPError as exc:  # reported by the test, not as a thread crash
            self.error = exc

    def _flood(self) -> None:
        body = b"x" * 65536
        while not self.stop.is_set():
            self.channel.basic_publish("", self.queues[self.sent % len(self.queues)], body,
                                       PERSISTENT)  # fmt: skip
            self.sent += 1
            self.connection.process_data_events(0)
        self.channel.confirm_delivery()
        self.channel.basic_publish("", self.queues[0], b"last", PERSISTENT)
        self.confirmed_last = True
        self.connection.process_data_events(0)
        self.connection.close()

    def steadily_blocked(self, for_seconds: float) -> bool:
        """Blocked, and nothing has changed for ``for_seconds``."""
        return bool(self.events) and (
            self.events[-1][0] == "blocked" and time.monotonic() - self.events[-1][1] > for_seconds
        )


class Drainer:
    """A consumer of every queue that acks each delivery as it comes."""

    def __init__(self, broker: brokerpods.BrokerPod, queues: list[str]) -> None:
        self.connection = broker.connect()
        channel = self.connection.channel()
        channel.basic_qos(prefetch_count=20)
        self.received: list[float] = []
        for queue in queues:
            channel.basic_consume(queue, self._on_message)
            # BlockingConnection runs consumer callbacks only here: without it the deliveries
            # that arrive during the other eleven consumes wait in pika's buffer, and a fresh
            # CI run saw its first callback 12 ms after an unblock (the memory had fallen by
            # then) although the deliveries had arrived while the publisher was blocked.
            self.connection.process_data_events(0)

    def _on_message(self, channel: Any, method: Any, _props: Any, _body: bytes) -> None:
        self.received.append(time.monotonic())
        channel.basic_ack(method.delivery_tag)

    def until(self, done: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
            self.connection.process_data_events(0.05)


def test_memory_pressure_in_the_pod_cgroup_blocks_publishers_not_consumers_and_no_oom_kill(
    make_broker: Any,
) -> None:
    spec = broker_spec("128Mi")
    broker = make_broker("pressure", spec)
    watermark = memory.watermark(spec["resources"], spec["memoryHighWatermark"])
    info = broker.node_info()
    assert info["mem_limit"] == watermark.high_watermark_bytes
    assert not info["mem_alarm"], info
    pod_cgroup = broker.pod_cgroup()
    oom_kills_before = brokerpods.oom_kills(pod_cgroup)
    before = broker.container_status()
    started = time.monotonic()

    queues = [f"pressure-{n}" for n in range(12)]
    flood = Flood(broker, queues)
    flood.start()
    try:
        waiting.wait_for(
            lambda: flood.steadily_blocked(1.5), timeout=30, interval=0.1,
            what="connection.blocked that holds for 1.5 s",
        )  # fmt: skip
    except AssertionError as exc:  # say what the flood and the broker saw
        logs = broker.plane.kubectl("logs", "-n", broker.namespace, broker.pod_path.rsplit("/")[-1],
                                    check=False)  # fmt: skip
        raise AssertionError(
            f"{exc}\nflood: sent={flood.sent} events={flood.events} alive={flood.is_alive()} "
            f"error={flood.error!r}\nbroker log tail:\n{logs.stdout[-4000:]}"
        ) from exc
    blocked_at = flood.events[-1][1]
    assert flood.events[-1][2] == "low on memory", flood.events
    info = broker.node_info()
    assert info["mem_alarm"], info
    assert info["mem_used"] > info["mem_limit"] == watermark.high_watermark_bytes, info

    drainer = Drainer(broker, queues)
    flood.stop.set()  # takes effect once the flood is unblocked: its publish is held till then
    drainer.until(lambda: not flood.is_alive(), 60, "the flood to be unblocked and finish")
    unblocks = [at for kind, at, _ in flood.events if kind == "unblocked" and at > blocked_at]
    assert unblocks, flood.events
    assert drainer.received, "the consumer received nothing"
    assert drainer.received[0] < unblocks[0], "the consumer only received once unblocked"
    assert flood.confirmed_last
    total = flood.sent + 1
    drainer.until(lambda: len(drainer.received) >= total, 60, f"all {total} messages")
    drainer.connection.close()
    waiting.wait_for(
        lambda: not broker.node_info()["mem_alarm"], timeout=10, interval=0.2,
        what="the memory alarm to clear",
    )  # fmt: skip

    after = broker.container_status()
    assert after["restartCount"] == before["restartCount"], after
    assert after["containerID"] == before["containerID"], after
    assert "terminated" not in after.get("lastState", {}), after["lastState"]
    assert brokerpods.oom_kills(pod_cgroup) == oom_kills_before
    peak = int((broker.cgroup() / "memory.max_usage_in_bytes").read_text())
    log.info(
        "pressure: %d x 64 KiB published, blocked after %.1fs, %d received before the unblock, "
        "%.1fs in all; cgroup peak %d of limit %d, watermark %d",
        flood.sent, blocked_at - started,
        sum(1 for at in drainer.received if at < unblocks[0]), time.monotonic() - started,
        peak, memory.quantity_bytes(spec["resources"]["limits"]["memory"]),
        watermark.high_watermark_bytes,
    )  # fmt: skip
