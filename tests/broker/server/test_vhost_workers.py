"""``hutch-broker --vhost-workers 2``: a listener process hands connections to vhost workers.

Real processes and real clients: the broker runs as production runs it, pika connects to the
listener's AMQP port, and each worker's own management API (``http-port + index``) shows where a
connection landed. What is checked: publish, confirm and consume across the handover, a pipelined
client's channel.open right behind connection.open, a second vhost's connection in the second
worker, bad credentials refused right after start-ok as RabbitMQ does, and a dead worker's vhost
refused with a reason while the other worker goes on.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass

import pika
import pika.exceptions
import pytest
from hutch_broker.server.listener import worker_for
from hutch_demo import ports
from hutch_demo.management import Management, quote
from hutch_testing import brokers, clients, levels
from pamqp import commands
from pamqp import frame as pamqp_frame

WORKERS = 2
TENANT = next(
    f"tenant-{n}" for n in range(100) if worker_for(f"tenant-{n}", 2) != worker_for("/", 2)
)


@dataclass(frozen=True)
class WorkerApi:
    """What ``Management`` needs to reach one worker's management API."""

    http_url: str
    credentials: tuple[str, str] = ("guest", "guest")


def _even_port_pair(taken: set[int]) -> int:
    """An even port p with p and p + 1 both free a moment ago and outside ``taken``: worker i's
    management API listens on http-port + i, and p + 1 stays in p's shard of the ports
    (``hutch_demo.ports`` shards by ``port >> 1``) only when p is even. An odd http port handed
    its worker 1 a port of the other pytest worker's shard, which one of its brokers could hold
    (a fresh-clone CI run: worker 1's API never answered)."""
    for _ in range(200):
        port = ports.free_port() & ~1
        if {port, port + 1} & taken:
            continue
        try:
            with socket.socket() as first, socket.socket() as second:
                first.bind((ports.LOOPBACK, port))
                second.bind((ports.LOOPBACK, port + 1))
        except OSError:
            continue
        return port
    raise OSError("no two adjacent free ports found")


@pytest.fixture
@levels.broker_level
def broker(tmp_path):
    started = brokers.HutchBroker(
        work_dir=tmp_path / "hutch", extra_args=["--vhost-workers", str(WORKERS)]
    )
    started.http_port = _even_port_pair({started.amqp_port})
    try:
        yield started.start()
    finally:
        started.stop()


@pytest.fixture
def apis(broker) -> list[Management]:
    """Each worker's management API, once it answers (the factory waited for worker 0's)."""
    found = [Management(WorkerApi(f"http://127.0.0.1:{broker.http_port + i}")) for i in range(2)]
    deadline = time.monotonic() + 20
    for api in found:
        while not _answers(api):
            assert time.monotonic() < deadline, f"{api.base} did not answer"
            time.sleep(0.1)
    return found


def _answers(api: Management) -> bool:
    try:
        return api.get("/overview").status == 200
    except OSError:
        return False


def _connection_vhosts(api: Management) -> list[str]:
    deadline = time.monotonic() + 10  # the listing is built from the worker's loop, not at once
    while True:
        listed = [item["vhost"] for item in api.get("/connections").body]
        if listed or time.monotonic() > deadline:
            return listed
        time.sleep(0.05)


def test_publish_confirm_and_consume_across_the_handover(broker, apis):
    home = apis[worker_for("/", WORKERS)]
    other = apis[1 - worker_for("/", WORKERS)]
    conn = clients.connect(broker)
    channel = conn.channel()
    channel.confirm_delivery()
    channel.queue_declare("handed-over", durable=True)
    for number in range(50):
        channel.basic_publish(
            "", "handed-over", f"m{number}".encode(), pika.BasicProperties(delivery_mode=2)
        )  # confirmed: BlockingChannel raises if the broker nacks or returns
    received = clients.drain(channel, "handed-over")
    assert received == [f"m{number}".encode() for number in range(50)]
    assert _connection_vhosts(home) == ["/"]
    assert other.get("/connections").body == []
    assert home.queue("handed-over")["durable"] is True
    assert not other.queue_exists("handed-over")
    conn.close()


def test_a_second_vhosts_connection_lands_in_the_second_worker(broker, apis):
    owner = apis[worker_for(TENANT, WORKERS)]
    assert owner.put(f"/vhosts/{quote(TENANT)}", {}).status in (201, 204)
    permission = {"configure": ".*", "write": ".*", "read": ".*"}
    assert owner.put(f"/permissions/{quote(TENANT)}/guest", permission).status in (201, 204)
    first = clients.connect(broker)
    second = clients.connect(broker, vhost=TENANT)
    channel = second.channel()
    channel.queue_declare("tenant-q")
    channel.basic_publish("", "tenant-q", b"hello")
    assert clients.drain(channel, "tenant-q") == [b"hello"]
    assert _connection_vhosts(owner) == [TENANT]
    assert _connection_vhosts(apis[worker_for("/", WORKERS)]) == ["/"]
    first.close()
    second.close()


def test_bad_credentials_are_refused_right_after_start_ok(broker, apis):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        clients.connect(broker, password="wrong")
    with socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=10) as raw:
        frames = FrameReader(raw)
        raw.sendall(b"AMQP\x00\x00\x09\x01")
        frames.next()  # connection.start
        start_ok = commands.Connection.StartOk({}, "PLAIN", "\0guest\0wrong", "en_US")
        raw.sendall(pamqp_frame.marshal(start_ok, 0))
        close = frames.next()
    assert isinstance(close, commands.Connection.Close)  # not a tune: refused before it
    assert close.reply_code == 403
    assert close.reply_text.startswith("ACCESS_REFUSED - Login was refused")
    assert all(api.get("/connections").body == [] for api in apis)


def test_a_pipelined_channel_open_behind_connection_open_is_served(broker, apis):
    with socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=10) as raw:
        frames = FrameReader(raw)
        raw.sendall(b"AMQP\x00\x00\x09\x01")
        frames.next()
        raw.sendall(
            pamqp_frame.marshal(commands.Connection.StartOk({}, "PLAIN", "\0guest\0guest"), 0)
        )
        assert isinstance(frames.next(), commands.Connection.Tune)
        raw.sendall(
            pamqp_frame.marshal(commands.Connection.TuneOk(2047, 131072, 0), 0)
            + pamqp_frame.marshal(commands.Connection.Open("/"), 0)
            + pamqp_frame.marshal(commands.Channel.Open(), 1)  # in the same write
        )
        assert isinstance(frames.next(), commands.Connection.OpenOk)
        assert isinstance(frames.next(), commands.Channel.OpenOk)


def test_a_dead_workers_vhost_is_refused_with_a_reason_and_the_other_goes_on(broker, apis):
    victim = 1 - worker_for("/", WORKERS)
    os.kill(_worker_pid(broker, victim), signal.SIGKILL)
    time.sleep(0.2)
    assert worker_for(TENANT, WORKERS) == victim
    with pytest.raises(
        (pika.exceptions.ConnectionClosedByBroker, pika.exceptions.ProbableAccessDeniedError)
    ) as refused:
        clients.connect(broker, vhost=TENANT)
    assert f"INTERNAL_ERROR - the worker process for vhost '{TENANT}' is not available" in str(
        refused.value
    )
    conn = clients.connect(broker)
    conn.channel().queue_declare("still-served")
    conn.close()


def _worker_pid(broker, index: int) -> int:
    for pid in broker.group_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                arguments = cmdline.read().split(b"\0")
        except OSError:
            continue
        flag = b"--vhost-worker-index"
        if flag in arguments and arguments[arguments.index(flag) + 1] == str(index).encode():
            return pid
    raise AssertionError(f"no vhost worker {index} among {broker.group_pids()}")


class FrameReader:
    """Frames from a raw socket, one at a time; bytes of the next frame are kept."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = b""

    def next(self):
        while len(self.data) < 7 or len(self.data) < 8 + int.from_bytes(self.data[3:7], "big"):
            chunk = self.sock.recv(4096)
            assert chunk, f"the broker closed the socket after {self.data!r}"
            self.data += chunk
        consumed, _, frame = pamqp_frame.unmarshal(self.data)
        self.data = self.data[consumed:]
        return frame
