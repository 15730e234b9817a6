"""A write permission narrowed while a channel publishes: the next publish is refused (#32).

Why: a publish asks the write permission only for an exchange not yet in the connection's
``writable_exchanges`` (4c24454), which must be emptied whenever the permission changes, or a
connection that published once could go on publishing after an administrator took its write
permission away. docs/broker.md: revoking a permission takes effect on open connections at once.
Each test publishes first (so the exchange is remembered), changes the permission through the
management API and publishes again on the same confirm-mode channel, with pika over a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hutch_demo.management import quote
from hutch_testing.clients import connect
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker

pytestmark = pytest.mark.shared_broker

EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


@pytest.fixture
def publisher(hutch_broker, api, vhost, vhost_user) -> Iterator[Callable[[], BlockingChannel]]:
    """A user of the test's own with every permission, and a way to open its channels."""
    assert api.put(f"/users/{quote(vhost_user)}", {"password": "pw", "tags": ""}).status == 201
    assert api.put(f"/permissions/{quote(vhost)}/{quote(vhost_user)}", EVERYTHING).status == 201
    conn = connect(hutch_broker, user=vhost_user, password="pw", vhost=vhost)

    def channel() -> BlockingChannel:
        opened = conn.channel()
        opened.confirm_delivery()
        return opened

    yield channel
    if conn.is_open:
        conn.close()


def set_write(api, vhost: str, user: str, write: str) -> None:
    body = {"configure": ".*", "write": write, "read": ".*"}
    assert api.put(f"/permissions/{quote(vhost)}/{quote(user)}", body).status == 204


def refused(ch: BlockingChannel, exchange: str, routing_key: str) -> tuple[int, str] | None:
    try:
        ch.basic_publish(exchange, routing_key, b"m")
    except ChannelClosedByBroker as exc:
        return exc.reply_code, exc.reply_text
    return None


@pytest.mark.parametrize("exchange", ["", "amq.direct"])
def test_a_narrowed_write_refuses_the_next_publish_on_the_same_channel(
    publisher, api, vhost, vhost_user, exchange
):
    ch = publisher()
    ch.queue_declare("target")
    ch.queue_bind("target", "amq.direct", "target")
    for _ in range(3):
        assert refused(ch, exchange, "target") is None
    set_write(api, vhost, vhost_user, "^nothing-here$")
    answer = refused(ch, exchange, "target")
    name = exchange or "amq.default"
    assert answer == (
        403,
        f"ACCESS_REFUSED - access to exchange '{name}' in vhost '{vhost}' "
        f"refused for user '{vhost_user}'",
    )
    assert api.get(f"/queues/{quote(vhost)}/target").body["messages"] == 3


def test_a_widened_write_allows_what_was_refused(publisher, api, vhost, vhost_user):
    """The refusal is not remembered past a change either: the other way round."""
    set_write(api, vhost, vhost_user, "^amq\\.fanout$")
    first = publisher()
    assert refused(first, "amq.fanout", "") is None
    assert refused(first, "amq.direct", "k") is not None
    set_write(api, vhost, vhost_user, "^amq\\.(fanout|direct)$")
    second = publisher()
    assert refused(second, "amq.direct", "k") is None
    assert refused(second, "amq.fanout", "") is None
    set_write(api, vhost, vhost_user, "^amq\\.direct$")
    assert refused(second, "amq.direct", "k") is None
    assert refused(second, "amq.fanout", "")[0] == 403


def test_each_exchange_is_asked_again_after_a_change(publisher, api, vhost, vhost_user):
    """Several exchanges remembered, one taken away: only that one is refused."""
    ch = publisher()
    for exchange in ("amq.direct", "amq.fanout", "amq.topic", "amq.headers"):
        assert refused(ch, exchange, "k") is None
    set_write(api, vhost, vhost_user, "^amq\\.(direct|fanout|headers)$")
    for exchange in ("amq.direct", "amq.fanout", "amq.headers"):
        assert refused(ch, exchange, "k") is None
    assert refused(ch, "amq.topic", "k")[0] == 403
