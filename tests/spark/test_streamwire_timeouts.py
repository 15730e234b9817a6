"""How often a stream read sets its socket's timeout (streamwire.StreamConnection.read), in
memory: a socket that hands out prepared frames and records every `settimeout`.

Before, every read set it, one system call per `recv` while deliveries flowed. Now a read sets
it only when what is left of its deadline (streamreads.ReadDeadline) drops under the timeout
the socket has, and raises it again only after that shorter timeout ended a recv early; the
deadline itself holds as before: no recv may block past it (readTimeoutMs), and heartbeats do
not extend it. The same on real brokers: test_streamreads.py, test_streamwire.py.
"""

from __future__ import annotations

import pika
import pytest
from hutch_spark import streamwire
from hutch_spark.streamframes import HEARTBEAT, SliceParser
from hutch_spark.streamplan import Slice
from hutch_spark.streamreads import ReadDeadline, SliceCursor

from tests.spark.test_streamframes import delivery

TIMEOUT_S = 30.0
HEARTBEAT_FRAME = streamwire.frame(HEARTBEAT, 0, b"")


class ScriptedSocket:
    """A socket whose `recv` answers the next of `chunks` (an exception is raised: a recv that
    waited its whole timeout), recording the timeout each recv ran under."""

    def __init__(self, chunks: list[bytes | BaseException]) -> None:
        self.chunks = list(chunks)
        self.timeout: float | None = None
        self.set_calls: list[float] = []
        self.recv_timeouts: list[float | None] = []

    def settimeout(self, timeout: float) -> None:
        self.set_calls.append(timeout)
        self.timeout = timeout

    def recv(self, _size: int) -> bytes:
        self.recv_timeouts.append(self.timeout)
        chunk = self.chunks.pop(0)
        if isinstance(chunk, BaseException):
            raise chunk
        return chunk

    def sendall(self, _payload: bytes) -> None:
        raise AssertionError("nothing is sent: the connection has no heartbeat")

    def close(self) -> None:
        pass


def reader(chunks: list[bytes | BaseException]) -> tuple[streamwire.StreamConnection, SliceParser]:
    connection = streamwire.StreamConnection(pika.URLParameters("amqp://h"), TIMEOUT_S)
    connection.sock = ScriptedSocket(chunks)  # type: ignore[assignment]
    cursor = SliceCursor(Slice("s", 0, 100_000), fail_on_data_loss=True)
    return connection, SliceParser("s", cursor)


def scripted(connection: streamwire.StreamConnection) -> ScriptedSocket:
    sock = connection.sock
    assert isinstance(sock, ScriptedSocket)
    return sock


def test_reads_while_deliveries_flow_set_the_timeout_once() -> None:
    batches = [b"".join(delivery(10 * n + k) for k in range(10)) for n in range(100)]
    connection, parser = reader(list(batches))
    deadline = ReadDeadline(TIMEOUT_S, now=0.0)
    now = 0.0
    for _ in batches:
        now += 0.01
        connection.read(parser, deadline.wait_s(parser.deliveries, now))
    assert parser.deliveries == 1000
    sock = scripted(connection)
    assert len(sock.set_calls) == 1, f"{len(sock.set_calls)} settimeout calls for 100 reads"
    assert all(timeout == sock.set_calls[0] for timeout in sock.recv_timeouts)


def test_a_read_never_blocks_past_the_deadline_heartbeats_do_not_move() -> None:
    connection, parser = reader([HEARTBEAT_FRAME] * 5 + [TimeoutError("timed out")])
    deadline = ReadDeadline(TIMEOUT_S, now=0.0)
    waits = []
    for step in range(5):  # a heartbeat every 5 s, and then nothing
        waits.append(deadline.wait_s(parser.deliveries, now=step * 5.0))
        connection.read(parser, waits[-1])
    waits.append(deadline.wait_s(parser.deliveries, now=25.0))
    with pytest.raises(TimeoutError):
        connection.read(parser, waits[-1])
    assert waits == [30.0, 25.0, 20.0, 15.0, 10.0, 5.0]
    assert scripted(connection).recv_timeouts == waits  # each recv bounded by what is left


def test_a_timeout_lowered_near_a_deadline_does_not_end_a_later_read_early() -> None:
    """A recv lowered to 0.5 s near the end of a wait; then deliveries come, and the next
    read's deadline is 30 s away: its recv ending after 0.5 s is no timeout of the read, which
    waits on for the rest and gets its delivery."""
    chunks: list[bytes | BaseException] = [delivery(0), TimeoutError("timed out"), delivery(1)]
    connection, parser = reader(chunks)
    connection.read(parser, 0.5)
    connection.read(parser, TIMEOUT_S)
    assert parser.deliveries == 2
    sock = scripted(connection)
    assert sock.recv_timeouts[:2] == [0.5, 0.5]
    assert sock.recv_timeouts[2] == pytest.approx(TIMEOUT_S, abs=1.0)
    assert len(sock.set_calls) == 2


def test_a_read_whose_whole_wait_passed_is_a_timeout() -> None:
    connection, parser = reader([TimeoutError("timed out")])
    with pytest.raises(TimeoutError):
        connection.read(parser, 2.0)
    assert scripted(connection).recv_timeouts == [2.0]
