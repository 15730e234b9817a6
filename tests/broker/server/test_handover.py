"""The handover (server/handover.py, server/workerlink.py, the listener) on real sockets,
without a broker process.

A TCP connection on loopback stands for the client's; its accepted end is queued in a
``WorkerLink`` with a record, as the listener queues it, written over a Unix socket pair and
taken by the ``Receiver`` as a worker takes it. The receiver is driven by hand (``readable``)
so each step is seen, except in the listener's test, where real clients handshake with a
``Listener`` on loopback and the workers' ends are read from the loop. Every test checks that
no descriptor is left open in this process.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Callable

import pytest
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import handshakes
from hutch_broker.server import handover, workerlink
from hutch_broker.server.listener import Listener, worker_for
from pamqp import commands
from pamqp import frame as pamqp_frame

from tests.broker.server import handshake_record

pytestmark = pytest.mark.broker

RECORD = handshake_record.record(b"\x01\x00\x01")


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def fds_checked():
    """Fails the test if it leaves a descriptor open (a 0.1 s grace is not needed: all sync)."""
    before = open_fds()
    yield
    assert open_fds() <= before


@pytest.fixture
def tcp_pair(fds_checked):
    """(client, accepted) on loopback; both closed afterwards if still open."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    yield client, accepted
    client.close()
    accepted.close()


class Worker:
    """The worker's end of a pair, recording what it adopted."""

    def __init__(self, sock: socket.socket) -> None:
        self.adopted: list[tuple[socket.socket, handshakes.Handshake]] = []
        self.closed_calls = 0
        self.receiver = handover.Receiver(sock, self._adopt, self._on_closed)

    def _adopt(self, client: socket.socket, handshake: handshakes.Handshake) -> None:
        self.adopted.append((client, handshake))

    def _on_closed(self) -> None:
        self.closed_calls += 1


@pytest.fixture
def loop(fds_checked):
    """A loop the links register their writers with; not run (the tests drive by hand)."""
    made = asyncio.new_event_loop()
    yield made
    made.close()


@pytest.fixture
def channel(loop):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link, worker = workerlink.WorkerLink(0, loop), Worker(theirs)
    attach_ready(link, ours, worker)
    yield link, worker
    link.close()
    worker.receiver.close()
    for client, _ in worker.adopted:
        client.close()


def attach_ready(link: workerlink.WorkerLink, ours: socket.socket, worker: Worker) -> None:
    """Attach a worker whose loop reads: it says READY and the link hears it."""
    link.attach(ours)
    worker.receiver.ready()
    link.read_answers()
    assert link.ready


def ready_but_reading_nothing(link: workerlink.WorkerLink, theirs: socket.socket) -> None:
    """A worker that said READY and then read nothing more."""
    theirs.send(handover.READY)
    link.read_answers()
    assert link.ready


def submit(link: workerlink.WorkerLink, fd: int, record: bytes, *, now: float = 0.0) -> None:
    link.submit(fd, record, vhost="v", user="guest", now=now)


def read_close(client: socket.socket) -> commands.Connection.Close:
    """The connection.close a refused client reads before the end of its stream."""
    data = b""
    while chunk := client.recv(4096):
        data += chunk
    _, channel_number, close = pamqp_frame.unmarshal(data)
    assert channel_number == 0
    assert isinstance(close, commands.Connection.Close)
    return close


def test_the_worker_takes_the_socket_and_the_record(tcp_pair, channel):
    client, accepted = tcp_pair
    listener_end, worker = channel
    submit(listener_end, accepted.fileno(), handshakes.encode(RECORD))
    accepted.close()  # the listener lets its descriptor go; the connection stays up
    worker.receiver.readable()
    ((adopted, record),) = worker.adopted
    assert record == RECORD
    assert adopted.getpeername() == client.getsockname()
    adopted.sendall(b"open-ok")
    assert client.recv(100) == b"open-ok"
    client.sendall(b"channel.open")
    assert adopted.recv(100) == b"channel.open"


def test_several_connections_arrive_in_order_however_the_stream_is_read(channel, fds_checked):
    listener_end, worker = channel
    pairs = [socket.socketpair() for _ in range(3)]
    for number, (mine, _) in enumerate(pairs):
        submit(listener_end, mine.fileno(), _with_vhost(f"v{number}"))
        mine.close()
    worker.receiver.readable()
    assert [record.vhost for _, record in worker.adopted] == ["v0", "v1", "v2"]
    for (adopted, _), (_, theirs) in zip(worker.adopted, pairs, strict=True):
        adopted.sendall(b"x")
        assert theirs.recv(1) == b"x"
        theirs.close()


def _with_vhost(vhost: str) -> bytes:
    return handshakes.encode(
        handshakes.Handshake(
            start_ok=RECORD.start_ok,
            channel_max=RECORD.channel_max,
            frame_max=RECORD.frame_max,
            heartbeat=RECORD.heartbeat,
            vhost=vhost,
        )
    )


def test_a_record_that_does_not_decode_closes_the_client_with_a_reason(tcp_pair, channel):
    client, accepted = tcp_pair
    listener_end, worker = channel
    submit(listener_end, accepted.fileno(), b'{"version": 9}')
    accepted.close()
    worker.receiver.readable()
    assert worker.adopted == []
    close = read_close(client)
    assert close.reply_code == 541
    assert close.reply_text.startswith("INTERNAL_ERROR - the broker could not take over")
    assert "unknown record version 9" in close.reply_text


def test_a_dead_workers_connections_wait_for_the_next_worker(tcp_pair, loop):
    client, accepted = tcp_pair
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = workerlink.WorkerLink(0, loop)
    link.attach(ours)
    ready_but_reading_nothing(link, theirs)
    theirs.close()  # then died: the next write finds it gone
    submit(link, accepted.fileno(), handshakes.encode(RECORD))
    assert (link.attached, link.waiting(), link.handed_over) == (False, 1, 0)  # detached
    accepted.close()  # the link holds its own descriptor: the client is still connected
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    worker = Worker(theirs)
    attach_ready(link, ours, worker)  # the restarted worker
    worker.receiver.readable()
    ((adopted, record),) = worker.adopted
    assert record == RECORD
    assert (link.waiting(), link.handed_over) == (0, 1)
    adopted.sendall(b"open-ok")
    assert client.recv(100) == b"open-ok"
    adopted.close()
    link.close()
    worker.receiver.close()


def test_a_starting_worker_is_handed_nothing_so_its_death_loses_no_connection(tcp_pair, loop):
    """A worker whose store recovery hangs is killed before its loop ever reads: the
    connections that came meanwhile were never written to it, so they go to the next worker
    whole, and no client sees its stream end."""
    client, accepted = tcp_pair
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.setblocking(False)
    link = workerlink.WorkerLink(0, loop)
    link.attach(ours)
    theirs.send(handover.ANSWER)  # its start beats: alive, recovering
    link.read_answers()
    submit(link, accepted.fileno(), handshakes.encode(RECORD))
    accepted.close()
    assert (link.ready, link.waiting(), link.handed_over) == (False, 1, 0)
    with pytest.raises(BlockingIOError):
        theirs.recv(100)  # nothing written to it
    theirs.close()  # killed as stuck
    link.detach()  # as the supervisor does on its exit
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    worker = Worker(theirs)
    link.attach(ours)
    assert link.waiting() == 1  # still held: the new one is not ready either
    worker.receiver.ready()
    link.read_answers()
    worker.receiver.readable()
    ((adopted, record),) = worker.adopted
    assert record == RECORD
    adopted.sendall(b"open-ok")
    assert client.recv(100) == b"open-ok"
    adopted.close()
    link.close()
    worker.receiver.close()


def stuck_pair() -> tuple[socket.socket, socket.socket]:
    """A handover pair whose listener end takes little before a worker that reads nothing
    makes it wait: a small send buffer, as a busy worker's would be after a while."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    return ours, theirs


def test_a_worker_that_reads_nothing_fills_its_queue_and_then_refuses(loop):
    ours, theirs = stuck_pair()
    link = workerlink.WorkerLink(0, loop, max_waiting=3)
    link.attach(ours)
    ready_but_reading_nothing(link, theirs)
    clients: list[socket.socket] = []
    with pytest.raises(workerlink.QueueFullError):
        submit_until_refused(link, clients)
    assert link.waiting() == 3
    assert 0 < link.handed_over < 200
    refused_now = clients[-1]  # the listener answers this one itself, not the link
    close_order = clients[-4:-1]  # the three waiting
    link.close()  # the broker stops: what waits is refused
    for client in close_order:
        close = read_close(client)
        assert (close.reply_code, close.reply_text) == (
            541,
            "INTERNAL_ERROR - access to vhost 'v' refused for user 'guest': vhost 'v' is down",
        )
    assert refused_now.recv(100) == b""  # only the end of our own copy: no close from the link
    for client in clients:
        client.close()
    theirs.close()  # with the descriptors still in it: the kernel closes them


def submit_until_refused(link: workerlink.WorkerLink, clients: list[socket.socket]) -> None:
    for _ in range(200):
        client, mine = socket.socketpair()
        clients.append(client)
        try:
            submit(link, mine.fileno(), handshakes.encode(RECORD))
        finally:
            mine.close()  # as the listener's transport does, refused or not


def test_connections_that_wait_too_long_are_refused_and_the_rest_stay(loop):
    link = workerlink.WorkerLink(0, loop)  # never attached: the worker is down
    clients = []
    for since in (1.0, 2.0, 3.0):
        client, mine = socket.socketpair()
        clients.append(client)
        submit(link, mine.fileno(), handshakes.encode(RECORD), now=since)
        mine.close()
    assert link.expire(now=12.5, max_wait_s=10.0) == 2
    assert link.waiting() == 1
    assert read_close(clients[0]).reply_code == 541
    assert read_close(clients[1]).reply_code == 541
    link.close()
    assert read_close(clients[2]).reply_code == 541
    for client in clients:
        client.close()


def test_a_queue_bound_below_one_is_refused(loop):
    with pytest.raises(ValueError, match="max_waiting must be 1 or more"):
        workerlink.WorkerLink(0, loop, max_waiting=0)


def test_the_listener_going_away_stops_the_worker_and_closes_what_it_had_not_adopted(
    tcp_pair, channel
):
    client, accepted = tcp_pair
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    worker = Worker(theirs)
    record = handshakes.encode(RECORD)
    # A frame cut short: its descriptor arrived, its record did not, then the listener died.
    socket.send_fds(ours, [struct.pack(">I", len(record)) + record[:10]], [accepted.fileno()])
    accepted.close()
    ours.close()
    worker.receiver.readable()
    assert worker.adopted == []
    assert worker.closed_calls == 1
    assert worker.receiver.closed
    assert read_close(client).reply_text == "INTERNAL_ERROR - the broker's listener went away"


def test_a_frame_above_the_bound_breaks_the_channel(fds_checked):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    worker = Worker(theirs)
    ours.sendall(struct.pack(">I", handshakes.MAX_RECORD_SIZE + 1))
    ours.close()
    worker.receiver.readable()
    assert worker.receiver.closed
    assert worker.closed_calls == 1


STUCK_VHOST, LIVE_VHOST = "/", "tenant-0"  # worker 0 and worker 1 of two


async def test_a_worker_that_reads_nothing_holds_up_only_its_own_vhosts():
    """The listener's loop never waits for a worker: while worker 0 reads nothing, every one
    of worker 1's clients is handed over; worker 0's clients fill its socket, then its queue,
    then are refused with RabbitMQ's answer for a vhost that is down, and the waiting ones go
    through once it reads."""
    assert (worker_for(STUCK_VHOST, 2), worker_for(LIVE_VHOST, 2)) == (0, 1)
    loop = asyncio.get_running_loop()
    before = open_fds()
    users = Broker(cluster_name="test")
    users.create_defaults()
    links = [workerlink.WorkerLink(index, loop, max_waiting=3) for index in range(2)]
    stuck_end, stuck_peer = stuck_pair()
    live_end, live_peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    links[0].attach(stuck_end)
    links[1].attach(live_end)
    stuck_peer.send(handover.READY)  # worker 0 said it reads, then reads nothing
    live = Worker(live_peer)
    loop.add_reader(live_peer.fileno(), live.receiver.readable)
    live.receiver.ready()
    await until(lambda: links[0].ready and links[1].ready)
    listener = Listener({"server_properties": {}}, users, links)
    await listener.start("127.0.0.1", 0)
    clients: list[asyncio.StreamWriter] = []
    refusals: list[commands.Connection.Close] = []
    count = 30
    for number in range(count):
        reader, writer = await open_amqp(listener.port, STUCK_VHOST)
        clients.append(writer)
        taken = links[0].handed_over + links[0].waiting()
        refusal = asyncio.ensure_future(read_frame(reader))  # or nothing, when queued
        await until(
            lambda: refusal.done() or links[0].handed_over + links[0].waiting() > taken  # noqa: B023
        )
        if refusal.done():
            refusals.append(refusal.result())
        refusal.cancel()
        _, writer = await open_amqp(listener.port, LIVE_VHOST)
        clients.append(writer)
        await until(lambda: len(live.adopted) == number + 1)  # noqa: B023
    assert len(live.adopted) == count  # all handed over while worker 0 read nothing
    assert {record.vhost for _, record in live.adopted} == {LIVE_VHOST}
    assert links[0].waiting() == 3
    assert 0 < len(refusals) < count - 3
    assert {(close.reply_code, close.reply_text) for close in refusals} == {
        (541, "INTERNAL_ERROR - access to vhost '/' refused for user 'guest': vhost '/' is down")
    }
    stuck = Worker(stuck_peer)  # worker 0 reads again: its queue drains
    loop.add_reader(stuck_peer.fileno(), stuck.receiver.readable)
    await until(lambda: len(stuck.adopted) == count - len(refusals))
    assert links[0].waiting() == 0
    assert {record.vhost for _, record in stuck.adopted} == {STUCK_VHOST}

    listener.close()
    for worker, peer in ((live, live_peer), (stuck, stuck_peer)):
        loop.remove_reader(peer.fileno())
        worker.receiver.close()
        for client, _ in worker.adopted:
            client.close()
    for link in links:
        link.close()
    for writer in clients:
        writer.close()
    await asyncio.sleep(0.05)  # the transports close on the loop's next turns
    assert open_fds() <= before


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop turn until ``condition``: the listener and the links run on this loop and
    signal nothing a test could await, so their counters are polled (pytest-timeout bounds a
    hang)."""
    while not condition():  # noqa: ASYNC110 - no event to wait on, see above
        await asyncio.sleep(0.005)


async def open_amqp(port: int, vhost: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client through the handshake to connection.open (sent with tune-ok, as pika does)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"AMQP\x00\x00\x09\x01")
    await read_frame(reader)  # connection.start
    writer.write(pamqp_frame.marshal(commands.Connection.StartOk({}, "PLAIN", "\0guest\0guest"), 0))
    assert isinstance(await read_frame(reader), commands.Connection.Tune)
    writer.write(
        pamqp_frame.marshal(commands.Connection.TuneOk(2047, 131072, 0), 0)
        + pamqp_frame.marshal(commands.Connection.Open(vhost), 0)
    )
    await writer.drain()
    return reader, writer


async def read_frame(reader: asyncio.StreamReader):
    header = await reader.readexactly(7)
    rest = await reader.readexactly(int.from_bytes(header[3:7], "big") + 1)
    return pamqp_frame.unmarshal(header + rest)[2]
