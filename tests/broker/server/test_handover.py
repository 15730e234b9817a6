"""The handover transport (server/handover.py) on real sockets, without a broker.

A TCP connection on loopback stands for the client's; its accepted end is sent over a Unix
socket pair with a record, as the listener sends it, and taken by the ``Receiver`` as a worker
takes it. The receiver is driven by hand (``readable``) so each step is seen. Every test checks
that no descriptor is left open in this process.
"""

from __future__ import annotations

import os
import socket
import struct

import pytest
from hutch_broker.protocol import codec, handshakes
from hutch_broker.server import handover
from pamqp import commands
from pamqp import frame as pamqp_frame

pytestmark = pytest.mark.broker

RECORD = handshakes.Handshake(
    start_ok=codec.encode_method(
        0, commands.Connection.StartOk({"product": "test"}, "PLAIN", "\0guest\0guest", "en_US")
    )[7:-1],
    channel_max=2047,
    frame_max=131072,
    heartbeat=60,
    vhost="/",
    leftover=b"\x01\x00\x01",
)


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
def channel(fds_checked):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    listener_end, worker = handover.WorkerChannel(ours), Worker(theirs)
    yield listener_end, worker
    listener_end.close()
    worker.receiver.close()
    for client, _ in worker.adopted:
        client.close()


def test_the_worker_takes_the_socket_and_the_record(tcp_pair, channel):
    client, accepted = tcp_pair
    listener_end, worker = channel
    listener_end.send(accepted.fileno(), handshakes.encode(RECORD))
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
        listener_end.send(mine.fileno(), _with_vhost(f"v{number}"))
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
    listener_end.send(accepted.fileno(), b'{"version": 9}')
    accepted.close()
    worker.receiver.readable()
    assert worker.adopted == []
    data = b""
    while chunk := client.recv(4096):
        data += chunk
    _, channel_number, close = pamqp_frame.unmarshal(data)
    assert channel_number == 0
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 541
    assert close.reply_text.startswith("INTERNAL_ERROR - the broker could not take over")
    assert "unknown record version 9" in close.reply_text


def test_a_dead_worker_makes_send_fail_and_the_listener_keeps_its_socket(tcp_pair, fds_checked):
    client, accepted = tcp_pair
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.close()
    listener_end = handover.WorkerChannel(ours)
    with pytest.raises(BrokenPipeError):
        listener_end.send(accepted.fileno(), handshakes.encode(RECORD))
    accepted.sendall(b"still ours")  # nothing moved: the listener can still answer the client
    assert client.recv(100) == b"still ours"
    listener_end.close()


def test_the_listener_going_away_stops_the_worker_and_closes_what_it_had_not_adopted(
    tcp_pair, channel
):
    client, accepted = tcp_pair
    listener_end, worker = channel
    record = handshakes.encode(RECORD)
    # A frame cut short: its descriptor arrived, its record did not, then the listener died.
    raw = socket.socket(fileno=os.dup(listener_end.fileno()))
    socket.send_fds(raw, [struct.pack(">I", len(record)) + record[:10]], [accepted.fileno()])
    raw.close()
    accepted.close()
    listener_end.close()
    worker.receiver.readable()
    assert worker.adopted == []
    assert worker.closed_calls == 1
    assert worker.receiver.closed
    data = b""
    while chunk := client.recv(4096):
        data += chunk
    _, _, close = pamqp_frame.unmarshal(data)
    assert close.reply_text == "INTERNAL_ERROR - the broker's listener went away"


def test_a_frame_above_the_bound_breaks_the_channel(channel):
    listener_end, worker = channel
    raw = socket.socket(fileno=os.dup(listener_end.fileno()))
    raw.sendall(struct.pack(">I", handshakes.MAX_RECORD_SIZE + 1))
    raw.close()
    worker.receiver.readable()
    assert worker.receiver.closed
    assert worker.closed_calls == 1
