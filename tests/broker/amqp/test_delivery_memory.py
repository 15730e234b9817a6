"""Delivery-side memory stays bounded (docs/isolation/memory.md).

A consumer that stops reading its socket, or that sits on large unacked messages, must cost
its own deliveries, not the broker's memory: before the bound, 400 x 1 MB persistent messages
to a prefetch-0 consumer that never read took the broker from 73 to 827 MB, the memory alarm
went off and every publisher of every vhost was blocked. The consumer here is a raw socket
with a small receive buffer, so the test decides exactly when the client reads.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pika
import pytest
from hutch_demo.management import Management
from pamqp import commands
from pamqp import frame as pamqp_frame

MiB = 1024 * 1024
_FRAME_HEADER = struct.Struct(">BHI")


def body_for(n: int, size: int) -> bytes:
    stamp = n.to_bytes(4, "big")
    return stamp + bytes([n % 251]) * (size - len(stamp))


class RawConsumer:
    """Just enough AMQP 0-9-1 to consume from one queue and then read only when told to."""

    def __init__(self, port: int, *, vhost: str = "/") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(30)
        self._buffer = bytearray()
        self._pos = 0
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self._expect(commands.Connection.Start)
        self._send(
            commands.Connection.StartOk(
                client_properties={"product": "raw"},
                mechanism="PLAIN",
                response="\x00guest\x00guest",
                locale="en_US",
            )
        )
        tune = self._expect(commands.Connection.Tune)
        self._send(commands.Connection.TuneOk(tune.channel_max, tune.frame_max, 0))
        self._send(commands.Connection.Open(virtual_host=vhost))
        self._expect(commands.Connection.OpenOk)
        self._send(commands.Channel.Open(), channel=1)
        self._expect(commands.Channel.OpenOk)

    def consume(self, queue: str, *, prefetch: int = 0) -> None:
        if prefetch:
            self._send(commands.Basic.Qos(prefetch_count=prefetch), channel=1)
            self._expect(commands.Basic.QosOk)
        self._send(commands.Basic.Consume(queue=queue, consumer_tag="raw"), channel=1)
        self._expect(commands.Basic.ConsumeOk)

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        self._send(commands.Basic.Ack(delivery_tag, multiple=multiple), channel=1)

    def deliveries(self, count: int) -> Iterator[tuple[int, bool, bytes]]:
        """(delivery tag, redelivered, body) of the next ``count`` deliveries."""
        for _ in range(count):
            deliver = self._expect(commands.Basic.Deliver)
            kind, payload = self._frame()
            assert kind == 2, f"content header expected, got frame type {kind}"
            size = struct.unpack_from(">Q", payload, 4)[0]
            parts = []
            while size > sum(map(len, parts)):
                kind, payload = self._frame()
                assert kind == 3, f"body frame expected, got frame type {kind}"
                parts.append(payload)
            yield deliver.delivery_tag, deliver.redelivered, b"".join(parts)

    def nothing_more(self, wait: float) -> bool:
        """True when no byte arrives within ``wait`` seconds."""
        if len(self._buffer) > self._pos:
            return False
        self.sock.settimeout(wait)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(30)
        self._buffer += chunk
        return False

    def close(self) -> None:
        self.sock.close()

    # -- framing --------------------------------------------------------

    def _send(self, method: object, channel: int = 0) -> None:
        self.sock.sendall(pamqp_frame.marshal(method, channel))  # type: ignore[arg-type]

    def _expect(self, kind: type) -> object:
        while True:
            frame_type, payload = self._frame()
            if frame_type == 8:  # heartbeat
                continue
            assert frame_type == 1, f"method frame expected, got frame type {frame_type}"
            raw = _FRAME_HEADER.pack(1, 0, len(payload)) + payload + b"\xce"
            method = pamqp_frame.unmarshal(raw)[2]
            assert isinstance(method, kind), f"{kind.__name__} expected, got {method}"
            return method

    def _frame(self) -> tuple[int, bytes]:
        self._fill(7)
        frame_type, _, size = _FRAME_HEADER.unpack_from(self._buffer, self._pos)
        self._fill(7 + size + 1)
        start = self._pos + 7
        payload = bytes(self._buffer[start : start + size])
        self._pos = start + size + 1
        if self._pos > 4 * MiB:
            del self._buffer[: self._pos]
            self._pos = 0
        return frame_type, payload

    def _fill(self, wanted: int) -> None:
        while len(self._buffer) - self._pos < wanted:
            chunk = self.sock.recv(1024 * 1024)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            self._buffer += chunk


class RSSWatch:
    """The broker's peak VmRSS, sampled every 50 ms while the block runs."""

    def __init__(self, broker: object) -> None:
        self.broker = broker
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RSSWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.broker.rss_bytes())  # type: ignore[attr-defined]
            self._stop.wait(0.05)


def start_broker(factory, tmp_path, watermark: int):
    config = tmp_path / "broker.conf"
    config.write_text(f"vm_memory_high_watermark.absolute = {watermark}\n")
    broker = factory(extra_args=["--config", str(config)])
    api = Management(broker)
    assert api.put("/vhosts/other", {}).status in (201, 204)
    assert api.put(
        "/permissions/other/guest", {"configure": ".*", "write": ".*", "read": ".*"}
    ).status in (201, 204)
    return broker


def publish(broker, queue: str, count: int, size: int, *, persistent: bool) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(queue, durable=True)
    properties = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    for n in range(count):
        ch.basic_publish("", queue, body_for(n, size), properties)
    conn.close()


def other_tenant_publishes(broker, count: int = 20) -> float:
    """Seconds a publisher in another vhost needs for ``count`` confirmed publishes; it fails
    if the broker blocks it (a memory alarm) for 10 s."""
    params = pika.ConnectionParameters(
        "127.0.0.1", broker.amqp_port, virtual_host="other", blocked_connection_timeout=10
    )
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("canary")
    began = time.monotonic()
    for _ in range(count):
        ch.basic_publish("", "canary", b"ping")
    elapsed = time.monotonic() - began
    conn.close()
    return elapsed


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_consumer_that_stops_reading_costs_no_broker_memory(hutch_broker_factory, tmp_path):
    watermark, count, size = 300 * MiB, 300, MiB
    broker = start_broker(hutch_broker_factory, tmp_path, watermark)
    publish(broker, "bulk", count, size, persistent=True)
    time.sleep(1.5)  # a memory sample pages the backlog out
    before = broker.rss_bytes()
    consumer = RawConsumer(broker.amqp_port)
    with RSSWatch(broker) as watch:
        consumer.consume("bulk")  # prefetch 0, and from now on it reads nothing
        time.sleep(3)
        elapsed = other_tenant_publishes(broker)
    assert elapsed < 5, f"a publisher in another vhost needed {elapsed:.1f} s"
    growth = watch.peak - before
    assert growth < 64 * MiB, (
        f"broker RSS grew by {growth / MiB:.0f} MiB (from {before / MiB:.0f} MiB) for a "
        "consumer that reads nothing"
    )
    assert watch.peak < watermark
    received = 0
    for tag, _, body in consumer.deliveries(count):  # now it reads: everything, in order
        assert body == body_for(received, size), f"delivery {received} is not message {received}"
        received += 1
        if tag % 50 == 0:
            consumer.ack(tag, multiple=True)
    consumer.ack(0, multiple=True)
    assert received == count
    consumer.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_prefetch_times_large_persistent_bodies_is_not_held_in_memory(
    hutch_broker_factory, tmp_path
):
    """Prefetch 50 x 4 MiB unacked persistent messages: 200 MiB if their bodies stayed."""
    watermark, count, size, prefetch = 256 * MiB, 60, 4 * MiB, 50
    broker = start_broker(hutch_broker_factory, tmp_path, watermark)
    publish(broker, "big", count, size, persistent=True)
    time.sleep(1.5)
    before = broker.rss_bytes()
    consumer = RawConsumer(broker.amqp_port)
    with RSSWatch(broker) as watch:
        consumer.consume("big", prefetch=prefetch)
        first = [body for _, _, body in consumer.deliveries(prefetch)]  # read, none acked
        assert consumer.nothing_more(0.5), "more than the prefetch count was delivered"
        time.sleep(1.5)
        elapsed = other_tenant_publishes(broker)
    assert elapsed < 5, f"a publisher in another vhost needed {elapsed:.1f} s"
    assert first == [body_for(n, size) for n in range(prefetch)]
    growth = watch.peak - before
    assert growth < 64 * MiB, (
        f"broker RSS grew by {growth / MiB:.0f} MiB with {prefetch} x {size // MiB} MiB unacked"
    )
    consumer.ack(prefetch, multiple=True)
    rest = [body for _, _, body in consumer.deliveries(count - prefetch)]
    assert rest == [body_for(n, size) for n in range(prefetch, count)]
    consumer.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_unacked_transient_bodies_stop_at_the_connection_budget(hutch_broker_factory, tmp_path):
    """Transient bodies must stay in memory for redelivery: the connection's budget (1/8 of
    the watermark) stops deliveries, however large the prefetch; acks let the rest through,
    and a closed channel's messages come back whole, in order."""
    watermark, count, size = 256 * MiB, 24, 4 * MiB
    budget = watermark // 8
    broker = start_broker(hutch_broker_factory, tmp_path, watermark)
    publish(broker, "transient", count, size, persistent=False)
    consumer = RawConsumer(broker.amqp_port)
    consumer.consume("transient", prefetch=50)
    held = budget // size  # deliveries stop once held bytes reach the budget
    first = [body for _, _, body in consumer.deliveries(held)]
    assert consumer.nothing_more(1.0), f"more than {held} x 4 MiB unacked were delivered"
    assert first == [body_for(n, size) for n in range(held)]
    consumer.ack(2, multiple=True)  # 8 MiB released: two more come
    more = [body for _, _, body in consumer.deliveries(2)]
    assert more == [body_for(n, size) for n in range(held, held + 2)]
    assert consumer.nothing_more(1.0)
    consumer.close()  # everything unacked goes back, whole
    api = Management(broker)
    deadline = time.monotonic() + 10
    while api.queue("transient")["messages_unacknowledged"] and time.monotonic() < deadline:
        time.sleep(0.05)
    again = RawConsumer(broker.amqp_port)
    again.consume("transient")
    received = []
    for tag, redelivered, body in again.deliveries(count - 2):
        received.append((redelivered, body))
        again.ack(tag)
    expected = [(n < held + 2, body_for(n, size)) for n in range(2, count)]
    assert received == expected
    again.close()


def test_stored_bodies_dropped_once_sent_come_back_whole(hutch_broker):
    """A persistent body is dropped from memory once its delivery is encoded; a requeue, a
    dead-lettering and a quorum queue's return read it back from the store."""
    size = 64 * 1024
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", hutch_broker.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("dead", durable=True)
    ch.queue_declare(
        "work",
        durable=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
    )
    ch.queue_declare("quorum", durable=True, arguments={"x-queue-type": "quorum"})
    persistent = pika.BasicProperties(delivery_mode=2)
    for n in range(6):
        ch.basic_publish("", "work", body_for(n, size), persistent)
        ch.basic_publish("", "quorum", body_for(n, size), persistent)
    ch.basic_qos(prefetch_count=6)
    got: list[tuple[str, int, bytes]] = []

    def on_message(channel, method, _properties, body):
        got.append((method.routing_key, method.delivery_tag, body))

    ch.basic_consume("work", on_message)
    ch.basic_consume("quorum", on_message)
    while len(got) < 12:
        conn.process_data_events(time_limit=1)
    work = [(tag, body) for key, tag, body in got if key == "work"]
    quorum = [(tag, body) for key, tag, body in got if key == "quorum"]
    assert [body for _, body in work] == [body_for(n, size) for n in range(6)]
    for tag, _ in work[:3]:
        ch.basic_reject(tag, requeue=False)  # dead-lettered
    for tag, _ in quorum:
        ch.basic_nack(tag, requeue=True)  # back to the quorum queue, delivered again
    conn.process_data_events(time_limit=0.5)
    ch.close()  # the other 3 of "work" are requeued
    ch = conn.channel()
    dead = [ch.basic_get("dead", auto_ack=True)[2] for _ in range(3)]
    assert dead == [body_for(n, size) for n in range(3)]
    again = [ch.basic_get("work", auto_ack=True) for _ in range(3)]
    assert [(method.redelivered, body) for method, _, body in again] == [
        (True, body_for(n, size)) for n in range(3, 6)
    ]
    returned = [ch.basic_get("quorum", auto_ack=True)[2] for _ in range(6)]
    assert sorted(returned) == sorted(body_for(n, size) for n in range(6))
    conn.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_many_stuck_consumers_together_stay_under_the_broker_wide_bound(
    hutch_broker_factory, tmp_path
):
    """40 consumers that never read, on one queue of 1,000 x 128 KiB: each is within its own
    bounds (2 MiB write marks, 512 KiB slice at this watermark), and all of them together stay
    under the broker-wide bound on buffered output (1/4 of the watermark) with a margin. The
    kernel's socket buffers take much of each consumer's share here, so the broker-wide bound
    itself is checked in memory (tests/broker/server/test_delivery_slices.py)."""
    watermark, count, size, consumers = 128 * MiB, 1000, 128 * 1024, 40
    broker = start_broker(hutch_broker_factory, tmp_path, watermark)
    publish(broker, "shared", count, size, persistent=True)
    time.sleep(1.5)
    before = broker.rss_bytes()
    stuck = [RawConsumer(broker.amqp_port) for _ in range(consumers)]
    with RSSWatch(broker) as watch:
        for consumer in stuck:
            consumer.consume("shared")
        time.sleep(3)
        elapsed = other_tenant_publishes(broker)
    assert elapsed < 5, f"a publisher in another vhost needed {elapsed:.1f} s"
    growth = watch.peak - before
    assert growth < watermark // 4 + 16 * MiB, (
        f"broker RSS grew by {growth / MiB:.0f} MiB for {consumers} consumers that read nothing"
    )
    for consumer in stuck:
        consumer.close()
