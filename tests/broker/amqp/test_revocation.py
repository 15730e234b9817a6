"""Deleting a vhost, a user or a permission takes effect on open connections (issue 11, 3 and 10).

Before, a connection kept working in a deleted vhost (and its durable queue then bricked the
next start after kill -9), and a deleted user could go on publishing. RabbitMQ closes such
connections with 320 CONNECTION_FORCED.

The module shares one broker (``shared_broker``): a test's users are named after its vhost
(users are broker-wide) and deleted after it, and its connections are in its vhost. Deleting a
vhost and restarting the broker needs a broker of its own.
"""

import signal
import time

import pika
import pytest
from hutch_demo.management import quote
from hutch_testing import vhosts
from hutch_testing.clients import connect
from pika.exceptions import AMQPConnectionError, ChannelClosedByBroker, ConnectionClosedByBroker


def closed_by_broker(conn) -> ConnectionClosedByBroker:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            conn.process_data_events(0.1)
        except ConnectionClosedByBroker as exc:
            return exc
    raise AssertionError("the connection was not closed")


def keep_publishing(conn, ch) -> None:
    for _ in range(100):
        ch.basic_publish("", "target", b"after revocation")
        conn.process_data_events(0.01)


pytestmark = pytest.mark.shared_broker

EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


@pytest.fixture
def mgmt(hutch_broker):
    return vhosts.management_for(hutch_broker)


def _user(mgmt, vhost: str, name: str):
    """A user of the test's own (users are broker-wide), deleted after it if still there."""
    user = f"{name}-{vhost}"
    yield user
    mgmt.delete(f"/users/{quote(user)}")


@pytest.fixture
def bob(mgmt, vhost):
    yield from _user(mgmt, vhost, "bob")


@pytest.fixture
def eve(mgmt, vhost):
    yield from _user(mgmt, vhost, "eve")


@pytest.mark.own_broker  # it deletes a vhost and restarts the broker
def test_deleting_a_vhost_closes_its_connections_and_the_broker_restarts(hutch_broker, mgmt):
    assert mgmt.put("/vhosts/tenant", {}).status in (201, 204)
    conn = connect(hutch_broker, vhost="tenant")
    ch = conn.channel()
    ch.queue_declare("kept", durable=True)
    other = connect(hutch_broker)  # in "/": must stay open
    assert mgmt.delete("/vhosts/tenant").status == 204
    exc = closed_by_broker(conn)
    assert exc.reply_code == 320
    assert "tenant" in exc.reply_text
    assert other.is_open
    other.channel().queue_declare("still-fine", durable=True)
    hutch_broker.kill(signal.SIGKILL)
    hutch_broker.start()  # the journal names no queue in a vhost that is gone
    assert not mgmt.get("/vhosts/tenant").ok
    assert mgmt.queue_exists("still-fine")


def test_deleting_a_user_closes_their_connections(hutch_broker, mgmt, vhost, bob):
    assert mgmt.put(f"/users/{quote(bob)}", {"password": "pw", "tags": ""}).ok
    assert mgmt.put(f"/permissions/{quote(vhost)}/{quote(bob)}", EVERYTHING).ok
    bobs = connect(hutch_broker, user=bob, password="pw", vhost=vhost)
    bobs.channel().queue_declare("bobs")
    guest = connect(hutch_broker, vhost=vhost)
    assert mgmt.delete(f"/users/{quote(bob)}").status == 204
    exc = closed_by_broker(bobs)
    assert exc.reply_code == 320
    assert guest.is_open
    with pytest.raises(AMQPConnectionError):
        connect(hutch_broker, user=bob, password="pw", vhost=vhost)


def test_deleting_a_permission_closes_and_changing_one_applies_at_once(
    hutch_broker, mgmt, vhost, bob
):
    permission = f"/permissions/{quote(vhost)}/{quote(bob)}"
    assert mgmt.put(f"/users/{quote(bob)}", {"password": "pw", "tags": ""}).ok
    assert mgmt.put(permission, EVERYTHING).ok
    bobs = connect(hutch_broker, user=bob, password="pw", vhost=vhost)
    ch = bobs.channel()
    ch.queue_declare("q1")
    ch.basic_publish("", "q1", b"allowed")
    narrowed = {"configure": "^$", "write": "^$", "read": ".*"}
    assert mgmt.put(permission, narrowed).ok
    with pytest.raises(ChannelClosedByBroker) as refused:
        ch.queue_declare("q2")
    assert refused.value.reply_code == 403
    assert not mgmt.queue_exists("q2")
    assert mgmt.delete(permission).status == 204
    exc = closed_by_broker(bobs)
    assert exc.reply_code == 320
    assert mgmt.queue("q1")["messages"] == 1


def test_revoked_publisher_cannot_publish_after_deletion(hutch_broker, mgmt, vhost, eve):
    assert mgmt.put(f"/users/{quote(eve)}", {"password": "pw", "tags": ""}).ok
    assert mgmt.put(f"/permissions/{quote(vhost)}/{quote(eve)}", EVERYTHING).ok
    conn = connect(hutch_broker, vhost=vhost)
    conn.channel().queue_declare("target")
    eves = connect(hutch_broker, user=eve, password="pw", vhost=vhost)
    ch = eves.channel()
    assert mgmt.delete(f"/users/{quote(eve)}").status == 204
    with pytest.raises((ConnectionClosedByBroker, pika.exceptions.StreamLostError)):
        keep_publishing(eves, ch)
    assert mgmt.queue("target")["messages"] == 0
