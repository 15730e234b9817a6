"""Topic permissions, side by side: the management API and what pika sees on each broker.

RabbitMQ 3.10.8 checks a user's topic permission for an exchange only when the exchange is of
type topic: the routing key of a publish must match ``write``, the routing key of a queue or
exchange bind (and unbind) must match ``read``; an exchange with no topic permission allows
everything; ``{username}`` and ``{vhost}`` in a pattern are replaced before it is matched; an
empty pattern matches only the empty routing key. hutch-broker is held to the same
observations, with pika over real sockets.
"""

from __future__ import annotations

from typing import Any

import pytest
from pika.exceptions import ChannelClosedByBroker

pytestmark = pytest.mark.timeout(60)


def _user(target: Any, request: Any) -> str:
    api, user = target.api, target.name("user")
    assert api.put(f"/users/{user}", {"password": "pw", "tags": ""}).status == 201
    request.addfinalizer(lambda: api.delete(f"/users/{user}"))
    full = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put(f"/permissions/%2F/{user}", full).status == 201
    return user


def _outcome(action: Any) -> tuple[int, str] | None:
    try:
        action()
    except ChannelClosedByBroker as exc:
        return exc.reply_code, exc.reply_text
    return None


def test_topic_permissions_management_api(target: Any, request: Any) -> None:
    api, n = target.api, target.name
    user = _user(target, request)
    path = f"/topic-permissions/%2F/{user}"
    assert api.get(path).status == 404  # no entries yet
    first = {"exchange": n("a"), "write": "^a", "read": ""}
    second = {"exchange": n("b"), "write": "", "read": "x"}
    assert api.put(path, first).status == 201
    assert api.put(path, second).status == 204  # the pair exists: every further one is 204
    assert api.put(path, {**second, "write": "y"}).status == 204  # replaces b's entry
    listed = sorted(api.get(path).body, key=lambda item: item["exchange"])
    assert listed == [
        {"user": user, "vhost": "/", **first},
        {"user": user, "vhost": "/", **second, "write": "y"},
    ]
    mine = [item for item in api.get("/topic-permissions").body if item["user"] == user]
    assert len(mine) == 2
    assert len(api.get(f"/users/{user}/topic-permissions").body) == 2
    by_vhost = api.get("/vhosts/%2F/topic-permissions").body
    assert {item["exchange"] for item in by_vhost if item["user"] == user} == {n("a"), n("b")}
    exported = api.get("/definitions").body["topic_permissions"]
    assert {item["exchange"] for item in exported if item["user"] == user} == {n("a"), n("b")}
    # Bad input: a 400 with RabbitMQ's reasons, and nothing changes.
    missing = api.put(path, {"exchange": n("c"), "write": "^a"})
    assert (missing.status, missing.body["reason"]) == (400, "[{key_missing,read}]")
    assert api.put(path, {"exchange": n("c"), "write": "(", "read": ""}).status == 400
    nobody = api.put("/topic-permissions/%2F/nobody-here", first)
    assert (nobody.status, nobody.body["reason"]) == (400, "vhost_or_user_not_found")
    assert len(api.get(path).body) == 2
    # DELETE clears all of the user's topic permissions in the vhost, even given an exchange.
    assert api.request("DELETE", path, {"exchange": n("a")}).status == 204
    assert api.get(path).status == 404
    assert api.delete(path).status == 404


def test_topic_permissions_are_enforced(target: Any, request: Any) -> None:
    api, n = target.api, target.name
    user = _user(target, request)
    topic, other, direct, fanout = n("t"), n("t2"), n("d"), n("f")
    for exchange, kind in ((topic, "topic"), (other, "topic"), (direct, "direct"),
                           (fanout, "fanout")):  # fmt: skip
        assert api.put(f"/exchanges/%2F/{exchange}", {"type": kind}).status == 201
    path = f"/topic-permissions/%2F/{user}"
    assert api.put(path, {"exchange": topic, "write": "^a\\.", "read": "^r\\."}).status == 201
    assert api.put(path, {"exchange": direct, "write": "^a", "read": "^a"}).status == 204
    assert api.put(path, {"exchange": other, "write": "^{username}\\.",
                          "read": "^{vhost}x$"}).status == 204  # fmt: skip
    connection = target.connect(user=user, password="pw")
    queue = n("q")
    connection.channel().queue_declare(queue)

    def attempt(action: Any) -> tuple[int, str] | None:
        channel = connection.channel()
        channel.confirm_delivery()
        return _outcome(lambda: action(channel))

    def refused(key: str, exchange: str) -> tuple[int, str]:
        return (403, f"ACCESS_REFUSED - access to topic '{key}' in exchange '{exchange}' in "
                     f"vhost '/' refused for user '{user}'")  # fmt: skip

    assert attempt(lambda ch: ch.basic_publish(topic, "a.x", b"1")) is None
    assert attempt(lambda ch: ch.basic_publish(topic, "b.x", b"1")) == refused("b.x", topic)
    assert attempt(lambda ch: ch.basic_publish(direct, "b", b"1")) is None  # not a topic exchange
    assert attempt(lambda ch: ch.basic_publish(other, f"{user}.x", b"1")) is None
    assert attempt(lambda ch: ch.basic_publish(other, "zz", b"1")) == refused("zz", other)
    assert attempt(lambda ch: ch.queue_bind(queue, topic, "r.1")) is None
    assert attempt(lambda ch: ch.queue_bind(queue, topic, "x.1")) == refused("x.1", topic)
    assert attempt(lambda ch: ch.queue_bind(queue, other, "/x")) is None  # {vhost} is "/"
    assert attempt(lambda ch: ch.exchange_bind(fanout, topic, "x.1")) == refused("x.1", topic)
    assert attempt(lambda ch: ch.exchange_bind(fanout, topic, "r.2")) is None
    assert attempt(lambda ch: ch.queue_unbind(queue, topic, "x.1")) == refused("x.1", topic)
    assert attempt(lambda ch: ch.exchange_unbind(fanout, topic, "x.1")) == refused("x.1", topic)
    # An empty pattern matches only the empty routing key.
    assert api.put(path, {"exchange": topic, "write": "", "read": ""}).status == 204
    assert attempt(lambda ch: ch.basic_publish(topic, "", b"1")) is None
    assert attempt(lambda ch: ch.basic_publish(topic, "a.x", b"1")) == refused("a.x", topic)
    # Cleared: everything is allowed again, on the same connection.
    assert api.delete(path).status == 204
    assert attempt(lambda ch: ch.basic_publish(topic, "b.x", b"1")) is None
    assert attempt(lambda ch: ch.queue_bind(queue, topic, "x.1")) is None
