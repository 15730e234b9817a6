"""Connection-level behaviour over real sockets: capabilities, shutdown, hostile input, auth."""

import base64
import json
import signal
import socket
import struct
import urllib.request
from types import SimpleNamespace

import pika
import pytest
from hutch_demo import management
from hutch_testing.clients import connect, drain
from pamqp import commands, frame
from pamqp import header as pamqp_header
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

CAPABILITIES = (
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "per_consumer_qos",
    "authentication_failure_close",
    "consumer_priorities",
    "direct_reply_to",
)
# One broker per module, a vhost per test; a test that restarts the broker, adds users or lists
# connections broker-wide is marked own_broker.
pytestmark = pytest.mark.shared_broker


def http(broker, method: str, path: str, body=None, user="guest", password="guest"):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{broker.http_url}{path}", data=data, method=method)  # noqa: S310
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return response.status


def test_server_properties_and_capabilities(connection):
    props = connection._impl.server_properties
    assert props["product"] in ("Hutch", b"Hutch")
    for capability in CAPABILITIES:
        assert props["capabilities"][capability] is True


@pytest.mark.own_broker  # it stops and restarts the broker
def test_sigterm_closes_clients_with_320_and_keeps_data(hutch_broker):
    conn = connect(hutch_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("kept", durable=True)
    ch.basic_publish("", "kept", b"persisted", pika.BasicProperties(delivery_mode=2))
    hutch_broker.kill(signal.SIGTERM)
    with pytest.raises(ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=5)
    assert info.value.reply_code == 320
    assert "CONNECTION_FORCED" in info.value.reply_text
    hutch_broker.start()
    assert drain(connect(hutch_broker).channel(), "kept") == [b"persisted"]


def _handshake(port: int, vhost: str) -> socket.socket:
    """A raw client that completes the handshake and opens channel 1."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    _read_frame(sock)  # start
    sock.sendall(
        frame.marshal(
            commands.Connection.StartOk(
                client_properties={}, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"
            ),
            0,
        )
    )
    _read_frame(sock)  # tune
    sock.sendall(frame.marshal(commands.Connection.TuneOk(2047, 131072, 0), 0))
    sock.sendall(frame.marshal(commands.Connection.Open(vhost), 0))
    _read_frame(sock)  # open-ok
    sock.sendall(frame.marshal(commands.Channel.Open(), 1))
    _read_frame(sock)  # channel open-ok
    return sock


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _read_frame(sock: socket.socket):
    head = _read_exact(sock, 7)
    size = struct.unpack(">I", head[3:7])[0]
    rest = _read_exact(sock, size + 1)
    return frame.unmarshal(head + rest)[2]


def test_malformed_frame_closes_only_that_connection(hutch_broker, vhost, connection):
    ch = connection.channel()
    ch.queue_declare("survivor")
    sock = _handshake(hutch_broker.amqp_port, vhost)
    sock.sendall(b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00\x0a\x00")  # bad frame-end octet
    closed = _read_frame(sock)
    assert isinstance(closed, commands.Connection.Close)
    assert closed.reply_code == 501
    sock.close()
    ch.basic_publish("", "survivor", b"still here")
    assert drain(ch, "survivor") == [b"still here"]


def test_garbage_protocol_header_gets_ours_back(hutch_broker):
    sock = socket.create_connection(("127.0.0.1", hutch_broker.amqp_port), timeout=5)
    sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert _read_exact(sock, 8) == b"AMQP\x00\x00\x09\x01"
    assert sock.recv(10) == b""  # and the socket is closed
    sock.close()


def test_content_header_without_publish_is_505(hutch_broker, vhost):
    sock = _handshake(hutch_broker.amqp_port, vhost)
    sock.sendall(frame.marshal(pamqp_header.ContentHeader(0, 3, commands.Basic.Properties()), 1))
    closed = _read_frame(sock)
    assert isinstance(closed, commands.Connection.Close)
    assert closed.reply_code == 505
    sock.close()


# The broker's heartbeat rule (server/amqp.py): on each tick it sends a heartbeat when it has sent
# nothing for half the negotiated interval, and drops a connection it has heard nothing from for
# two intervals. So before the drop it sends at most 2 / (1/2) = 4 heartbeats: the first at least
# half an interval after its open-ok, which is no earlier than the client's last frame, each next
# one half an interval after the one before, the last no later than two intervals after that
# frame. Counted on the broker's own clock, the bound holds however slowly its ticks come.
MOST_HEARTBEATS_BEFORE_THE_DROP = 4
DROPPED = "missed heartbeats from connection"  # the broker's log line for this reason


def test_heartbeats_are_sent_and_silent_clients_dropped(hutch_broker, vhost):
    """What is checked is which mechanism closed the socket and how many intervals of its own
    clock the broker let pass: its heartbeats before the drop (at most four for two intervals)
    and its log's reason, not the test's wall clock, which a loaded machine stretches."""
    log = getattr(hutch_broker, "process", hutch_broker).console_log  # the shared broker's
    logged_before = log.read_text(errors="replace").count(DROPPED)
    # (the socket's timeout only guards against a broker that sends nothing at all)
    sock = socket.create_connection(("127.0.0.1", hutch_broker.amqp_port), timeout=30)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    _read_frame(sock)
    sock.sendall(
        frame.marshal(
            commands.Connection.StartOk(
                client_properties={}, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"
            ),
            0,
        )
    )
    _read_frame(sock)
    sock.sendall(frame.marshal(commands.Connection.TuneOk(2047, 131072, 1), 0))  # 1 s heartbeat
    sock.sendall(frame.marshal(commands.Connection.Open(vhost), 0))
    _read_frame(sock)
    frame_types: list[int] = []
    with pytest.raises(ConnectionError):
        _read_until_closed(sock, frame_types, MOST_HEARTBEATS_BEFORE_THE_DROP)
    assert 8 in frame_types  # a heartbeat frame arrived
    # Dropped for the heartbeats it missed: the broker logs that reason before it closes.
    assert log.read_text(errors="replace").count(DROPPED) > logged_before, (
        f"the socket closed after {frame_types.count(8)} heartbeats, without {DROPPED!r} "
        "in the broker's log"
    )
    sock.close()


def _read_until_closed(sock: socket.socket, frame_types: list[int], most_heartbeats: int) -> None:
    """Reads frames until the broker closes the socket (ConnectionError); fails once more
    heartbeats came than it may send before dropping a silent client."""
    while True:
        head = _read_exact(sock, 7)
        _read_exact(sock, struct.unpack(">I", head[3:7])[0] + 1)
        frame_types.append(head[0])
        heartbeats = frame_types.count(8)
        assert heartbeats <= most_heartbeats, (
            f"still open after {heartbeats} heartbeats from the broker: a client silent for two "
            f"heartbeat intervals is dropped after at most {most_heartbeats}"
        )


@pytest.mark.own_broker  # it adds a user, which is broker-wide
def test_permissions_are_checked_on_every_operation(hutch_broker):
    assert http(hutch_broker, "PUT", "/api/users/app", {"password": "secret", "tags": ""}) == 201
    assert (
        http(
            hutch_broker,
            "PUT",
            "/api/permissions/%2F/app",
            {"configure": "^app\\.", "write": "^app\\.", "read": "^app\\."},
        )
        == 201
    )
    admin = connect(hutch_broker).channel()
    admin.queue_declare("other")
    conn = connect(hutch_broker, user="app", password="secret")
    ch = conn.channel()
    ch.queue_declare("app.q")  # allowed
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("other.q")
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        "ACCESS_REFUSED - access to queue 'other.q' in vhost '/' refused for user 'app'"
    )
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_get("other")
    assert info.value.reply_code == 403
    ch = conn.channel()
    ch.basic_publish("amq.direct", "k", b"x")  # write on amq.direct is refused
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("app.q", passive=True)
    assert info.value.reply_text == (
        "ACCESS_REFUSED - access to exchange 'amq.direct' in vhost '/' refused for user 'app'"
    )


@pytest.mark.own_broker  # it adds a user, which is broker-wide
def test_vhost_without_permission_is_refused(hutch_broker):
    http(hutch_broker, "PUT", "/api/vhosts/private", {})
    http(hutch_broker, "PUT", "/api/users/nobody", {"password": "pw", "tags": ""})
    with pytest.raises(
        (ConnectionClosedByBroker, pika.exceptions.ProbableAccessDeniedError)
    ) as info:
        connect(hutch_broker, user="nobody", password="pw", vhost="private")
    assert "NOT_ALLOWED - access to vhost 'private' refused for user 'nobody'" in str(info.value)


def test_default_user_comes_from_the_environment_on_first_boot(hutch_broker_factory, monkeypatch):
    monkeypatch.setenv("HUTCH_DEFAULT_USER", "hutch")
    monkeypatch.setenv("HUTCH_DEFAULT_PASS", "s3cret-from-a-secret")
    broker = hutch_broker_factory(username="hutch", password="s3cret-from-a-secret")
    conn = connect(broker, user="hutch", password="s3cret-from-a-secret")
    conn.channel().queue_declare("works")
    conn.close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(broker)  # guest/guest does not exist on such a broker


@pytest.mark.own_broker  # it adds a user and lists every connection of the broker
def test_management_close_needs_the_owner_or_an_administrator(hutch_broker):
    """DELETE /api/connections/{name} refusals; the close itself is compared with RabbitMQ in
    tests/sidebyside/test_policies_and_management.py."""
    mgmt = management.Management(hutch_broker)
    victim = connect(hutch_broker)
    [name] = [c["name"] for c in mgmt.get("/connections").body]
    assert mgmt.delete("/connections/no-such-connection").status == 404
    assert mgmt.put("/users/bob", {"password": "pw", "tags": ""}).ok
    bob = management.Management(
        SimpleNamespace(http_url=hutch_broker.http_url, credentials=("bob", "pw"))
    )
    assert bob.delete(f"/connections/{management.quote(name)}").status == 401
    assert victim.is_open
    assert mgmt.delete(f"/connections/{management.quote(name)}").status == 204
    with pytest.raises(ConnectionClosedByBroker) as closed:
        victim.process_data_events(time_limit=5)
    assert closed.value.reply_text == "CONNECTION_FORCED - Closed via management plugin"
