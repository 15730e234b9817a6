"""The broker drops a socket it closed (issue 11, item 9): with close-ok, without, after a 501.

RabbitMQ closes the socket when the close-ok arrives, at once after a framing error (nothing
more can be parsed), and after its 30 s closing timeout when the client never answers; with
heartbeats off nothing else would ever free the connection.
"""

import socket
import time

import pytest
from hutch_broker.dispatch.context import Context
from hutch_broker.model.broker import Broker
from hutch_broker.server import amqp
from hutch_broker.server.amqp import AMQPConnection
from hutch_testing import inmemory
from pamqp import commands, frame

OPTIONS = {"server_properties": {"product": "Hutch"}, "heartbeat": 0, "channel_max": 16}
# The socket tests share one broker, each in a vhost of its own; the rest run in memory.
pytestmark = pytest.mark.shared_broker


def handshake(sock: socket.socket, vhost: str) -> None:
    sock.sendall(inmemory.handshake_frames(vhost))


def read_until_close(sock: socket.socket) -> commands.Connection.Close:
    data = b""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        assert chunk, "socket closed before connection.close arrived"
        data += chunk
        while data:
            try:
                consumed, _, value = frame.unmarshal(data)
            except Exception:  # noqa: BLE001 - an incomplete frame: read more
                break
            data = data[consumed:]
            if isinstance(value, commands.Connection.Close):
                return value
    raise AssertionError("no connection.close")


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_504_then_close_ok_drops_the_socket_with_heartbeats_off(hutch_broker, vhost):
    with socket.create_connection(("127.0.0.1", hutch_broker.amqp_port)) as sock:
        handshake(sock, vhost)
        sock.sendall(frame.marshal(commands.Basic.Qos(prefetch_count=1), 7))  # channel 7 not open
        close = read_until_close(sock)
        assert close.reply_code == 504
        sock.sendall(frame.marshal(commands.Connection.CloseOk(), 0))
        assert closed_within(sock, 2.0)


def test_501_drops_the_socket_without_waiting_for_a_close_ok(hutch_broker, vhost):
    with socket.create_connection(("127.0.0.1", hutch_broker.amqp_port)) as sock:
        handshake(sock, vhost)
        sock.sendall(b"\x01\x00\x00\x00\x00\x00\x04abcd\x00")  # frame end 0x00, not 0xCE
        close = read_until_close(sock)
        assert close.reply_code == 501
        assert closed_within(sock, 2.0)


def test_no_close_ok_drops_the_socket_after_the_closing_timeout():
    broker = Broker()
    broker.create_defaults()
    connection = AMQPConnection(Context(broker, clock=lambda: 0), OPTIONS)
    transport = inmemory.FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.data_received(inmemory.handshake_frames())
    connection.data_received(frame.marshal(commands.Basic.Qos(prefetch_count=1), 7))
    connection.flush()
    assert connection.closing_since is not None
    now = connection.closing_since
    connection.tick(now + 29, handshake_timeout=10, closing_timeout=30)
    assert not transport.closed, "closed before the timeout"
    connection.tick(now + 31, handshake_timeout=10, closing_timeout=30)
    assert transport.closed


def _client_closed_connection(heartbeat: int = 0):
    """An in-memory connection whose client sent connection.close (heartbeat as negotiated)."""
    broker = Broker()
    broker.create_defaults()
    connection = AMQPConnection(Context(broker, clock=lambda: 0), OPTIONS)
    transport = inmemory.FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    frames = inmemory.handshake_frames()
    if heartbeat:
        frames = frames.replace(
            frame.marshal(commands.Connection.TuneOk(16, 131072, 0), 0),
            frame.marshal(commands.Connection.TuneOk(16, 131072, heartbeat), 0),
        )
    connection.data_received(frames)
    connection.flush()
    transport.written.clear()
    connection.data_received(frame.marshal(commands.Connection.Close(200, "bye", 0, 0), 0))
    connection.flush()
    return connection, transport


def test_after_the_client_s_close_the_socket_waits_for_the_client_up_to_the_closing_timeout():
    """RabbitMQ answers close-ok and reads on until the client drops the socket: dropping it
    first, with client bytes unread, resets the connection and can lose the close-ok."""
    connection, transport = _client_closed_connection()
    assert [type(f) for f in inmemory.decode_frames(b"".join(transport.written))] == [
        commands.Connection.CloseOk
    ]
    assert not transport.closed
    assert connection.awaiting_client_close
    assert connection.session is not None and connection.session.closed  # resources released

    sent = list(transport.written)
    connection.data_received(b"\x08\x00\x00\x00\x00\x00\x00\xce" * 1000 + b"garbage")
    connection.flush()
    assert transport.written == sent, "later bytes are read and discarded"
    assert not transport.closed

    now = connection.closing_since
    assert now is not None
    connection.tick(now + 29, handshake_timeout=10, closing_timeout=30)
    assert not transport.closed, "closed before the timeout"
    connection.tick(now + 31, handshake_timeout=10, closing_timeout=30)
    assert transport.closed
    connection.connection_lost(None)  # what asyncio calls after the close


def test_a_shorter_heartbeat_timeout_bounds_the_wait_instead():
    connection, transport = _client_closed_connection(heartbeat=5)
    now = connection.closing_since
    assert now is not None
    connection.tick(now + 4, handshake_timeout=10, closing_timeout=30)
    assert not transport.closed
    connection.tick(now + 6, handshake_timeout=10, closing_timeout=30)
    assert transport.closed
    sent = inmemory.decode_frames(b"".join(transport.written))
    assert [type(f) for f in sent] == [commands.Connection.CloseOk], "no heartbeat after it"
    connection.connection_lost(None)


def test_past_the_cap_on_waiting_sockets_a_client_s_close_drops_the_socket_at_once(monkeypatch):
    """Waiting sockets belong to no session, so no connection limit counts them: a client
    opening and closing connections without ever closing its side could pile them up."""
    waiting = AMQPConnection.awaiting_client_close_count
    monkeypatch.setattr(amqp, "MAX_AWAITING_CLIENT_CLOSE", waiting + 1)
    first, first_transport = _client_closed_connection()
    assert not first_transport.closed
    assert AMQPConnection.awaiting_client_close_count == waiting + 1

    second, second_transport = _client_closed_connection()
    assert second_transport.closed, "over the cap: closed after its close-ok, as before"
    assert inmemory.decode_frames(b"".join(second_transport.written))  # the close-ok went out

    first.connection_lost(None)
    second.connection_lost(None)
    assert AMQPConnection.awaiting_client_close_count == waiting
    third, third_transport = _client_closed_connection()
    assert not third_transport.closed, "room again once a waiting socket is gone"
    third.connection_lost(None)
