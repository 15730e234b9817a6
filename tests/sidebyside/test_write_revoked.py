"""A write permission narrowed while a channel publishes, side by side (#32).

Why: Hutch remembers, per connection, the exchanges a publish may write to (4c24454) and
forgets them when the permission changes. What a client sees after an administrator narrows the
write permission (the next publish on a channel that already published there, a publish on a
new channel, a publish after the permission is widened again) is held to RabbitMQ 3.10.8's
answer, with pika over real sockets.
"""

from __future__ import annotations

from typing import Any

import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker

pytestmark = pytest.mark.timeout(60)


def _answer(ch: BlockingChannel, exchange: str, routing_key: str) -> int | None:
    """None when the confirm came, else the reply code the channel was closed with."""
    try:
        ch.basic_publish(exchange, routing_key, b"m")
    except ChannelClosedByBroker as exc:
        return exc.reply_code
    return None


def test_narrowing_and_widening_write_while_publishing(target: Any, request: Any) -> None:
    api, n = target.api, target.name
    user = n("user")
    assert api.put(f"/users/{user}", {"password": "pw", "tags": ""}).status == 201
    request.addfinalizer(lambda: api.delete(f"/users/{user}"))
    path = f"/permissions/%2F/{user}"
    exchange = n("x")

    def write(pattern: str) -> None:
        body = {"configure": ".*", "write": pattern, "read": ".*"}
        assert api.put(path, body).status in (201, 204)

    write(".*")
    assert api.put(f"/exchanges/%2F/{exchange}", {"type": "fanout"}).status == 201
    conn = target.connect(user=user, password="pw")

    def channel() -> BlockingChannel:
        opened = conn.channel()
        opened.confirm_delivery()
        return opened

    publishing = channel()
    before = [_answer(publishing, exchange, "") for _ in range(3)]
    # The user's password and tags change: nothing a publish asks about.
    assert api.put(f"/users/{user}", {"password": "pw2", "tags": "monitoring"}).status == 204
    before.append(_answer(publishing, exchange, ""))
    write("^nothing-here$")
    same_channel = _answer(publishing, exchange, "")
    new_channel = _answer(channel(), exchange, "")
    write(".*")
    widened = _answer(channel(), exchange, "")
    assert before == [None] * 4
    # RabbitMQ's channel keeps the write checks it passed; Hutch asks again after any change.
    kept = target.expect("write-narrowed-same-channel", hutch=403, rabbitmq=None)
    assert (same_channel, new_channel, widened) == (kept, 403, None)


def test_a_definitions_import_that_narrows_write(target: Any, request: Any) -> None:
    """An imported permission replaces the user's as ``PUT /api/permissions`` does: a channel
    opened after the import publishes under the new one."""
    api, n = target.api, target.name
    user = n("user")
    assert api.put(f"/users/{user}", {"password": "pw", "tags": ""}).status == 201
    request.addfinalizer(lambda: api.delete(f"/users/{user}"))
    exchange = n("x")
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put(f"/permissions/%2F/{user}", everything).status == 201
    assert api.put(f"/exchanges/%2F/{exchange}", {"type": "fanout"}).status == 201
    conn = target.connect(user=user, password="pw")
    first = conn.channel()
    first.confirm_delivery()
    assert _answer(first, exchange, "") is None
    narrowed = {**everything, "write": "^nothing-here$", "vhost": "/", "user": user}
    assert api.post("/definitions", {"permissions": [narrowed]}).status in (200, 204)
    assert api.get(f"/permissions/%2F/{user}").body["write"] == "^nothing-here$"
    later = conn.channel()
    later.confirm_delivery()
    assert _answer(later, exchange, "") == 403


def test_write_is_checked_before_the_exchange_is_looked_up(target: Any, request: Any) -> None:
    """A publish the user may not write: refused for that, whether the exchange exists, is
    internal or is missing (RabbitMQ asks the permission first)."""
    api, n = target.api, target.name
    user = n("user")
    assert api.put(f"/users/{user}", {"password": "pw", "tags": ""}).status == 201
    request.addfinalizer(lambda: api.delete(f"/users/{user}"))
    narrowed = {"configure": ".*", "write": "^nothing-here$", "read": ".*"}
    assert api.put(f"/permissions/%2F/{user}", narrowed).status == 201
    internal = n("internal")
    body = {"type": "fanout", "internal": True}
    assert api.put(f"/exchanges/%2F/{internal}", body).status == 201
    conn = target.connect(user=user, password="pw")
    answers = []
    for exchange in (n("missing"), internal, "amq.direct"):
        ch = conn.channel()
        ch.confirm_delivery()
        try:
            ch.basic_publish(exchange, "k", b"m")
        except ChannelClosedByBroker as exc:
            answers.append((exc.reply_code, exc.reply_text))
        else:
            answers.append(None)
    assert answers == [
        (
            403,
            f"ACCESS_REFUSED - access to exchange '{name}' in vhost '/' refused for user '{user}'",
        )
        for name in (n("missing"), internal, "amq.direct")
    ]
