"""How many round trips a slice's start costs (streamwire.StreamConnection.consume), against a
scripted broker on a socket pair: no network, no broker process.

Why it matters: an availableNow query of N micro-batches starts every one of its slices on a
kept connection, so each round trip at a slice's start is paid N times per task thread
(docs/bench/profile.md, "An availableNow query against Kafka's"). `basic.qos` and
`basic.consume` go in one write and the reader waits once for both answers. The scripted peer
answers nothing until it has both requests: a reader that waited for qos-ok before sending the
consume would wait for ever (here, until its timeout).
"""

import socket
import struct
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from hutch_spark import streamwire
from hutch_spark.streamframes import METHOD, SliceParser
from pika import data

TIMEOUT_S = 20.0  # bounds a failure only: the peer answers as soon as it has both requests


def read_methods(sock: socket.socket, wanted: int) -> list[tuple[int, int, int, bytes]]:
    """The first `wanted` method frames the reader sent: (channel, class, method, arguments)."""
    buffer = b""
    found: list[tuple[int, int, int, bytes]] = []
    while len(found) < wanted:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= 7:
            kind, channel, size = struct.unpack_from(">BHI", buffer)
            if len(buffer) < 7 + size + 1:
                break
            payload, buffer = buffer[7 : 7 + size], buffer[7 + size + 1 :]
            if kind == METHOD:
                class_id, method_id = struct.unpack_from(">HH", payload)
                found.append((channel, class_id, method_id, payload[4:]))
    return found


class ScriptedBroker:
    """Answers basic.qos and basic.consume only once it has received both."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.requests: list[tuple[int, int, int, bytes]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.requests = read_methods(self.sock, 2)
        if [(c, k, m) for c, k, m, _ in self.requests] != [(1, 60, 10), (1, 60, 20)]:
            return  # not what a slice's start sends: answer nothing
        consume_ok = streamwire.short_string("ctag-1")
        self.sock.sendall(streamwire.method(1, 60, 11) + streamwire.method(1, 60, 21, consume_ok))


@pytest.fixture
def pair() -> Iterator[tuple[streamwire.StreamConnection, socket.socket]]:
    reader_end, broker_end = socket.socketpair()  # AF_UNIX: no network
    connection = streamwire.StreamConnection(SimpleNamespace(), TIMEOUT_S)  # type: ignore[arg-type]
    connection.sock = reader_end
    yield connection, broker_end
    reader_end.close()
    broker_end.close()


def test_qos_and_consume_take_one_round_trip(
    pair: tuple[streamwire.StreamConnection, socket.socket],
) -> None:
    connection, broker_end = pair
    broker = ScriptedBroker(broker_end)
    cursor = SimpleNamespace(expected=0, done=False, slice=SimpleNamespace(end=10))
    cursor.accept = lambda _offset: True
    parser = SliceParser("s", cursor)
    connection.consume(parser, "s", 7, 120)
    broker.thread.join(TIMEOUT_S)
    assert connection.consumer_tag == "ctag-1"
    qos, consume = broker.requests
    prefetch_size, prefetch_count, global_ = struct.unpack(">IHB", qos[3])
    assert (prefetch_size, prefetch_count, global_) == (0, 7, 0)
    queue, at = data.decode_short_string(consume[3], 2)  # after the reserved short
    tag, at = data.decode_short_string(consume[3], at)
    assert (queue, tag) == ("s", "")  # the broker names the consumer
    # no-local, no-ack, exclusive and no-wait in one octet, then the arguments
    assert data.decode_table(consume[3], at + 1)[0] == {"x-stream-offset": 120}
    assert not parser.methods  # both answers were taken
