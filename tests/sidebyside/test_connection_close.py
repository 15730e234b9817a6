"""The client's connection.close, side by side with RabbitMQ 3.10.8 (issue "Broker trust II").

Why: RabbitMQ answers a client's ``connection.close`` with ``close-ok`` and then keeps reading,
and discarding, until the client closes the socket (or a timeout passes). A broker that closes
its socket at once, with bytes of the client still unread, makes the kernel send a reset; the
reset can overtake the close-ok, so the client sees ECONNRESET instead of its close-ok, and a
client waiting for close-ok to run its close callback hangs. A raw socket shows exactly what
the client gets.
"""

import socket
import time

import pytest
from hutch_testing.rawamqp import HEARTBEAT, open_connection, read_frame
from pamqp import commands, frame

pytestmark = pytest.mark.rabbitmq


def _open(target, heartbeat: int = 0) -> socket.socket:
    """A raw client through the handshake, with channel 1 open."""
    return open_connection(target.broker, heartbeat=heartbeat)


def _reply_to_close(sock: socket.socket) -> str:
    """What the client reads after its close: "close-ok", "eof" or "reset"."""
    try:
        reply = read_frame(sock)
    except EOFError:
        return "eof"
    except ConnectionResetError:
        return "reset"
    return "close-ok" if isinstance(reply, commands.Connection.CloseOk) else repr(reply)


def _closed_by_the_broker(sock: socket.socket, timeout: float) -> bool:
    """True once the broker closed its side. RabbitMQ closes with SO_LINGER 0, a reset, once
    the client has shut down its own side: by then the reset costs the client nothing."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if sock.recv(4096) == b"":  # anything else (a heartbeat) is read past
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return False


def _still_open(sock: socket.socket) -> bool:
    """The client can still write, and the broker has not closed its side."""
    try:
        sock.sendall(HEARTBEAT)  # read and discarded by the broker
    except OSError:
        return False
    return not _closed_by_the_broker(sock, timeout=0.5)


def _close_by_the_client(sock: socket.socket) -> bool:
    """The client's side of the end: shut down writing, then the broker closes."""
    sock.shutdown(socket.SHUT_WR)
    closed = _closed_by_the_broker(sock, timeout=5)
    sock.close()
    return closed


def test_close_ok_reaches_a_client_whose_later_bytes_are_unread(target):
    """The client's close is followed by 1 MiB it sent before it saw close-ok."""
    sock = _open(target)
    close = frame.marshal(commands.Connection.Close(200, "bye", 0, 0), 0)
    try:
        sock.sendall(close + HEARTBEAT * (128 * 1024))
    except OSError as error:  # a broker that closed at once, with these bytes unread
        pytest.fail(f"the client's writes after its close failed: {error!r}")
    time.sleep(0.5)  # any reset has arrived by now

    assert _reply_to_close(sock) == "close-ok"
    assert _still_open(sock)
    assert _close_by_the_client(sock)


def test_after_close_ok_the_socket_stays_open_until_the_client_closes_it(target):
    sock = _open(target)
    sock.sendall(frame.marshal(commands.Connection.Close(200, "bye", 0, 0), 0))
    assert _reply_to_close(sock) == "close-ok"

    assert _still_open(sock)
    assert _close_by_the_client(sock)


def test_a_client_that_never_closes_is_dropped_after_its_heartbeat_timeout(target):
    """The wait is bounded: by the heartbeat timeout when one was negotiated (else 30 s)."""
    sock = _open(target, heartbeat=1)
    sock.sendall(frame.marshal(commands.Connection.Close(200, "bye", 0, 0), 0))
    assert _reply_to_close(sock) == "close-ok"

    assert _closed_by_the_broker(sock, timeout=6)
    sock.close()
