"""``hutch-broker --vhost-workers 2``: a listener process hands connections to vhost workers.

Real processes and real clients: the broker runs as production runs it, pika connects to the
listener's AMQP port, and each worker's own management API (``http-port + index``) shows where a
connection landed. What is checked: publish, confirm and consume across the handover, a pipelined
client's channel.open right behind connection.open, a second vhost's connection in the second
worker, bad credentials refused right after start-ok as RabbitMQ does (these four share one
broker of the module), and one worker first stopped (SIGSTOP: its vhost's client waits while
the other worker's clients are served, and is served once it runs again), then killed with
SIGKILL: restarted by the listener, which logs it, while the other worker goes on; its vhost's
clients reconnect through the new one and find the durable messages confirmed before the kill
(this one has its own broker, with a liveness bound far above its stop). A worker that is alive
but stuck (SIGSTOP, and no SIGCONT) is found by the listener's liveness question, logged, killed
and restarted while a canary connection on the other worker goes on, and keeps every message
confirmed before; a worker merely busy with a long sliced operation (a definitions import of
thousands of queues) is not killed (its own broker, with a short bound). A worker whose store
recovery hangs (its journal swapped for a FIFO nobody writes) is killed at each start, and one
whose recovery works for several bounds (tens of thousands of queues) is spared: its start beat
speaks for it while the loop cannot.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from hutch_broker.server.listener import worker_for
from hutch_demo import ports, probes, waiting
from hutch_demo.management import Management, quote
from hutch_testing import brokers, clients, levels
from pamqp import commands
from pamqp import frame as pamqp_frame

WORKERS = 2
TENANT = next(
    f"tenant-{n}" for n in range(100) if worker_for(f"tenant-{n}", 2) != worker_for("/", 2)
)


@contextlib.contextmanager
def _vhost_broker(work_dir: Path, *extra: str) -> Iterator[brokers.HutchBroker]:
    started = brokers.HutchBroker(
        work_dir=work_dir, extra_args=["--vhost-workers", str(WORKERS), *extra]
    )
    started.http_port = ports.even_pair({started.amqp_port})
    try:
        yield started.start()
    finally:
        started.stop()


@pytest.fixture(scope="module")
@levels.broker_level
def broker(tmp_path_factory):
    """One broker for the tests that neither kill nor break it: each closes its connections,
    and ``apis`` waits until both workers list none before the next test looks."""
    with _vhost_broker(tmp_path_factory.mktemp("vhost-workers") / "hutch") as started:
        yield started


@pytest.fixture
@levels.broker_level
def own_broker(tmp_path):
    """A broker of this test alone: the test kills one of its workers. The liveness bound is
    far above the test's stop, so the stopped worker is served again, not restarted."""
    with _vhost_broker(tmp_path / "hutch", "--vhost-worker-timeout", "600") as started:
        yield started


@pytest.fixture
def apis(broker) -> list[Management]:
    return _worker_apis(broker)


def _worker_apis(broker) -> list[Management]:
    """Each worker's management API, once it answers (the factory waited for worker 0's) and
    lists no connection (an earlier test's closed ones leave the listing on the worker's loop)."""
    username, password = broker.credentials
    api_ports = [broker.http_port + index for index in range(WORKERS)]

    def idle(port: int) -> bool:
        answers = probes.overview(broker.host, port, username=username, password=password)
        return answers is not None and not Management(broker).on_port(port).get("/connections").body

    for port in api_ports:
        waiting.wait_for(lambda port=port: idle(port), timeout=20, interval=0.1,
                         what=f"worker API on port {port} answering with no connections")  # fmt: skip
    return [Management(broker).on_port(port) for port in api_ports]


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


def _tenant_with_kept_messages(broker, victim: int) -> pika.BlockingConnection:
    """TENANT made on worker ``victim`` (its vhost lives there), and 20 persistent messages
    confirmed into its durable queue ``kept``; the connection that published them, still open."""
    owner = _worker_apis(broker)[victim]
    assert owner.put(f"/vhosts/{quote(TENANT)}", {}).status in (201, 204)
    permission = {"configure": ".*", "write": ".*", "read": ".*"}
    assert owner.put(f"/permissions/{quote(TENANT)}/guest", permission).status in (201, 204)
    connection = clients.connect(broker, vhost=TENANT)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("kept", durable=True)
    for number in range(20):
        channel.basic_publish(
            "", "kept", f"m{number}".encode(), pika.BasicProperties(delivery_mode=2)
        )  # confirmed: BlockingChannel raises if the broker nacks
    return connection


def test_a_stopped_then_killed_worker_holds_up_only_its_vhost_and_keeps_its_messages(own_broker):
    victim = worker_for(TENANT, WORKERS)
    assert victim != worker_for("/", WORKERS)
    before = _tenant_with_kept_messages(own_broker, victim)
    killed = _worker_pid(own_broker, victim)
    os.kill(killed, signal.SIGSTOP)  # first stuck: it reads nothing, its process lives
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(_declare_through, own_broker, TENANT)
            for _ in range(10):  # the other worker's clients are served meanwhile
                _declare_through(own_broker, "/")
            assert not waiting.done()  # handed to the stopped worker's socket: no open-ok yet
            os.kill(killed, signal.SIGCONT)
            assert waiting.result() == TENANT  # the worker reads again and serves it
    finally:
        os.kill(killed, signal.SIGCONT)
    os.kill(killed, signal.SIGKILL)

    other = clients.connect(own_broker)  # the other worker goes on
    other.channel().queue_declare("still-served")
    other.close()
    with contextlib.suppress(pika.exceptions.AMQPError):
        before.close()  # its worker is gone: the socket closed under it
    after, refusals = _connect_until_served(own_broker, TENANT)
    assert set(refusals) <= {  # what a client may hear while the worker restarts
        f"access to vhost '{TENANT}' refused for user 'guest': vhost '{TENANT}' is down"
    }
    channel = after.channel()
    assert clients.drain(channel, "kept") == [f"m{number}".encode() for number in range(20)]
    channel.basic_publish("", "kept", b"after the restart")
    assert clients.drain(channel, "kept") == [b"after the restart"]
    after.close()
    assert _worker_pid(own_broker, victim) != killed
    logged = own_broker.console_log.read_text(errors="replace")
    assert f"vhost worker {victim} (pid {killed}) exited, killed by SIGKILL, after" in logged
    assert "restarting it in 0.5 s, at " in logged


LIVENESS_BOUND_S = 1.5


@pytest.fixture
@levels.broker_level
def watched_broker(tmp_path):
    """A broker of this test alone, with a short liveness bound: the test stops a worker."""
    with _vhost_broker(
        tmp_path / "hutch", "--vhost-worker-timeout", str(LIVENESS_BOUND_S)
    ) as started:
        yield started


def test_a_stuck_worker_is_killed_and_restarted_but_a_busy_one_is_not(watched_broker):
    broker = watched_broker
    victim = worker_for(TENANT, WORKERS)
    before = _tenant_with_kept_messages(broker, victim)
    busy = _worker_pid(broker, victim)

    # Busy: one import of thousands of queues keeps the worker's loop working for several
    # bounds, a slice per turn; it answers between slices and is not killed.
    slow = Management(broker, timeout=300).on_port(broker.http_port + victim)
    size, took = 8000, 0.0
    while took <= 2 * LIVENESS_BOUND_S:  # doubled until the import lasts two bounds at least
        queues = [
            {"name": f"busy-{size}-{n}", "vhost": TENANT, "durable": False,
             "auto_delete": False, "arguments": {}}
            for n in range(size)
        ]  # fmt: skip
        started = time.monotonic()
        assert slow.post("/definitions", {"queues": queues}).status in (200, 201, 204)
        took = time.monotonic() - started
        size *= 2
    assert _worker_pid(broker, victim) == busy
    assert "is stuck" not in broker.console_log.read_text(errors="replace")

    # Stuck: stopped and never continued. The listener kills it and starts it again while
    # the canary on the other worker's vhost goes on, on one connection all along.
    canary = clients.connect(broker)
    canary_channel = canary.channel()
    canary_channel.queue_declare("canary", exclusive=True)
    os.kill(busy, signal.SIGSTOP)
    try:
        served = 0
        deadline = time.monotonic() + 120
        while _worker_pid_or_none(broker, victim) in (busy, None):
            assert time.monotonic() < deadline, "the stopped worker was never restarted"
            canary_channel.basic_publish("", "canary", f"c{served}".encode())
            assert clients.drain(canary_channel, "canary") == [f"c{served}".encode()]
            served += 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(busy, signal.SIGCONT)
    assert served > 0
    logged = broker.console_log.read_text(errors="replace")
    assert f"vhost worker {victim} (pid {busy}) is stuck: silent for " in logged
    assert f"no answer within {LIVENESS_BOUND_S:.1f} s; killing it (SIGKILL)" in logged
    assert f"vhost worker {victim} (pid {busy}) exited, killed by SIGKILL, after" in logged
    with contextlib.suppress(pika.exceptions.AMQPError):
        before.close()
    after, refusals = _connect_until_served(broker, TENANT)
    assert set(refusals) <= {
        f"access to vhost '{TENANT}' refused for user 'guest': vhost '{TENANT}' is down"
    }
    assert clients.drain(after.channel(), "kept") == [f"m{n}".encode() for n in range(20)]
    after.close()
    canary_channel.basic_publish("", "canary", b"after")
    assert clients.drain(canary_channel, "canary") == [b"after"]
    canary.close()


def test_a_worker_whose_store_recovery_hangs_is_restarted_until_it_can_read_its_store(
    watched_broker,
):
    """The worker's definitions journal is swapped for a FIFO nobody writes while it is down:
    each start beats once and then blocks opening it, for good (as on a disk that stopped
    answering). Each is killed as stuck and started again, while a canary on the other worker
    goes on and a client of the tenant keeps trying: it hears only RabbitMQ's answer for a
    vhost that is down (never its stream's end: a hung start is handed no connection) until,
    once the journal is back, the next start recovers every confirmed message and takes it."""
    broker = watched_broker
    victim = worker_for(TENANT, WORKERS)
    _tenant_with_kept_messages(broker, victim).close()
    first = _worker_pid(broker, victim)
    journal = broker.data_dir / f"worker-{victim}" / "definitions.log"
    kept = journal.with_name("definitions.log.kept")
    os.kill(first, signal.SIGSTOP)  # down while its store changes under it
    journal.rename(kept)
    os.mkfifo(journal)
    os.kill(first, signal.SIGKILL)
    # The tenant's client starts once the listener knows the ready worker is gone: a connection
    # handed to a worker that was ready when it was handed over dies with it (its client sees
    # its stream end), as on any crash. This test is about the starts after, which never are.
    _wait_logged(broker, f"vhost worker {victim} (pid {first}) exited", within_s=30)
    tenant = concurrent.futures.ThreadPoolExecutor(1)
    trying = tenant.submit(_connect_until_served, broker, TENANT, within_s=240)

    canary = clients.connect(broker)
    channel = canary.channel()
    channel.queue_declare("canary", exclusive=True)
    served, hung = 0, []
    deadline = time.monotonic() + 120
    while len(hung) < 2:  # two starts that hung, each killed
        assert time.monotonic() < deadline, f"hung starts killed: {hung}"
        channel.basic_publish("", "canary", f"c{served}".encode())
        assert clients.drain(channel, "canary") == [f"c{served}".encode()]
        served += 1
        logged = broker.console_log.read_text(errors="replace")
        hung = [
            pid for pid in _started_pids(logged, victim)[1:]
            if f"vhost worker {victim} (pid {pid}) is stuck: silent for " in logged
        ]  # fmt: skip
    assert served > 0
    assert not trying.done()
    journal.unlink()
    kept.rename(journal)
    after, refusals = trying.result()
    tenant.shutdown()
    assert refusals  # it tried while the hung starts were up
    assert set(refusals) <= {
        f"access to vhost '{TENANT}' refused for user 'guest': vhost '{TENANT}' is down"
    }
    assert clients.drain(after.channel(), "kept") == [f"m{n}".encode() for n in range(20)]
    after.close()
    canary.close()


# Its work grows with the machine's load: each round imports and recovers tens of thousands of
# queues, and its broker's stop saves them. 25 s at rest, 58 s of call (and a 60 s limit passed
# in teardown) in a cold CI run beside the Go builds: the limit is for a hang, not its pace.
@pytest.mark.timeout(300)
def test_a_worker_whose_recovery_works_longer_than_the_bound_is_not_killed(watched_broker):
    """A start that recovers thousands of queues, so its loop answers nothing for several
    liveness bounds: the worker's start beat speaks for it while the recovery progresses, and
    the listener lets it finish. The queues are doubled until one recovery outlasts the time
    a silent start would have been given (the first question a second after the first byte,
    and the bound after it), twice over."""
    broker = watched_broker
    victim = worker_for(TENANT, WORKERS)
    _tenant_with_kept_messages(broker, victim).close()
    api = Management(broker, timeout=300).on_port(broker.http_port + victim)
    silent_start_s = 1.0 + LIVENESS_BOUND_S
    declared, size, took, kills = 0, 20000, 0.0, 0
    while took <= 2 * silent_start_s:
        queues = [
            {"name": f"recovered-{n}", "vhost": TENANT, "durable": True,
             "auto_delete": False, "arguments": {}}
            for n in range(declared, declared + size)
        ]  # fmt: skip
        assert api.post("/definitions", {"queues": queues}).status in (200, 201, 204)
        declared += size
        killed = _worker_pid(broker, victim)
        os.kill(killed, signal.SIGKILL)
        kills += 1
        after, _refusals = _connect_until_served(broker, TENANT)
        after.close()
        took = _last_start_s(broker.console_log.read_text(errors="replace"), victim)
        size = declared  # doubles the total
    logged = broker.console_log.read_text(errors="replace")
    assert "is stuck" not in logged
    assert len(_started_pids(logged, victim)) == 1 + kills  # no start but the kills' restarts
    assert len(api.get(f"/queues/{quote(TENANT)}?columns=name").body) == declared + 1


def _last_start_s(logged: str, index: int) -> float:
    """Seconds from worker ``index``'s last logged start to its ready line after it."""
    started = f"vhost worker {index} started, pid "
    ready = f"vhost worker {index} ready "
    stamps: dict[str, datetime.datetime] = {}
    for line in logged.splitlines():
        for marker in (started, ready):
            if marker in line:  # "2026-11-30 04:33:51,518 INFO ..."
                when = line[:23] + " +0000"  # the log's own clock: only the difference counts
                stamps[marker] = datetime.datetime.strptime(when, "%Y-%m-%d %H:%M:%S,%f %z")
    assert started in stamps and ready in stamps, f"worker {index}: no start or no ready logged"
    return (stamps[ready] - stamps[started]).total_seconds()


def _started_pids(logged: str, index: int) -> list[int]:
    """Worker ``index``'s pids in the order the listener logged their starts."""
    marker = f"vhost worker {index} started, pid "
    return [
        int(line.split(marker, 1)[1].split()[0]) for line in logged.splitlines() if marker in line
    ]


def _wait_logged(broker, text: str, *, within_s: float) -> None:
    """Until the broker's console log has ``text``."""
    deadline = time.monotonic() + within_s
    while text not in broker.console_log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"not logged within {within_s:g} s: {text!r}"
        time.sleep(0.05)


def _worker_pid_or_none(broker, index: int) -> int | None:
    """Worker ``index``'s pid, or None between its kill and its restart."""
    try:
        return _worker_pid(broker, index)
    except AssertionError:
        return None


def _declare_through(broker, vhost: str) -> str:
    """A connection to ``vhost`` that declares a queue and closes: the vhost it was served in."""
    conn = clients.connect(broker, vhost=vhost)
    conn.channel().queue_declare("", exclusive=True)
    conn.close()
    return vhost


def _connect_until_served(broker, vhost: str, *, within_s: float = 60):
    """A connection to ``vhost`` once its worker serves it, and the refusals heard before."""
    refusals = []
    deadline = time.monotonic() + within_s
    while True:
        try:
            return clients.connect(broker, vhost=vhost), refusals
        except pika.exceptions.AMQPConnectionError as exc:
            assert time.monotonic() < deadline, f"{vhost} was not served again: {refusals}"
            refusals.append(_refusal_text(exc))
            time.sleep(0.2)


def _refusal_text(exc: Exception) -> str:
    """The reply text of a connection.close pika reports, or the exception's words. A close
    that comes before connection.open-ok pika reports as ``ProbableAccessDeniedError`` holding
    the close's repr, ``ConnectionClosedByBroker: (541) "<reply text>"``."""
    reply = getattr(exc, "reply_text", None)
    if reply is None and exc.args and isinstance(exc.args[-1], BaseException):
        reply = getattr(exc.args[-1], "reply_text", None)
    if reply is None and isinstance(exc, pika.exceptions.ProbableAccessDeniedError):
        said = re.fullmatch(r'ConnectionClosedByBroker: \(\d+\) "(.*)"', str(exc.args[0]))
        reply = said and said.group(1)
    return str(reply if reply is not None else exc).removeprefix("INTERNAL_ERROR - ")


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
