"""The user_id property is validated, side by side (#32 review).

Why: a consumer may trust a message's user_id only because the broker checks it: RabbitMQ
refuses a publish whose user_id names someone else than the authenticated user (406), unless the
user is tagged ``impersonator``, over AMQP and over the management API's publish. Hutch used to
accept any user_id. pika over real sockets, and the HTTP API, on both brokers.
"""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

pytestmark = pytest.mark.timeout(60)


def _user(target: Any, request: Any, name: str, tags: str) -> str:
    api = target.api
    assert api.put(f"/users/{name}", {"password": "pw", "tags": tags}).status == 201
    request.addfinalizer(lambda: api.delete(f"/users/{name}"))
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put(f"/permissions/%2F/{name}", everything).status == 201
    return name


def _publish(conn: Any, queue: str, user_id: str) -> tuple[int, str] | bytes:
    """The body got back, or the channel's error."""
    ch = conn.channel()
    ch.confirm_delivery()
    try:
        ch.basic_publish("", queue, b"m", pika.BasicProperties(user_id=user_id))
    except ChannelClosedByBroker as exc:
        return exc.reply_code, exc.reply_text
    method, properties, body = ch.basic_get(queue, auto_ack=True)
    assert method is not None
    assert properties.user_id == user_id
    return bytes(body)


def test_a_user_id_must_name_the_publisher_unless_they_impersonate(
    target: Any, request: Any
) -> None:
    n = target.name
    plain = _user(target, request, n("plain"), "")
    impersonator = _user(target, request, n("imp"), "impersonator")
    queue = n("q")
    assert target.api.put(f"/queues/%2F/{queue}", {}).status == 201
    as_plain = target.connect(user=plain, password="pw")
    as_impersonator = target.connect(user=impersonator, password="pw")
    assert _publish(as_plain, queue, plain) == b"m"
    assert _publish(as_plain, queue, "someone-else") == (
        406,
        f"PRECONDITION_FAILED - user_id property set to 'someone-else' but authenticated user "
        f"was '{plain}'",
    )
    assert _publish(as_impersonator, queue, "someone-else") == b"m"
    assert _publish(as_plain, queue, plain) == b"m"  # the connection still publishes


def test_an_http_publish_is_checked_as_the_http_user(target: Any) -> None:
    n, api = target.name, target.api
    queue = n("q")
    assert api.put(f"/queues/%2F/{queue}", {}).status == 201

    def publish(user_id: str) -> Any:
        body = {
            "routing_key": queue,
            "payload": "m",
            "payload_encoding": "string",
            "properties": {"user_id": user_id},
        }
        return api.post("/exchanges/%2F/amq.default/publish", body)

    own = publish("guest")
    assert (own.status, own.body) == (200, {"routed": True})
    forged = publish("someone-else")
    assert forged.status == 400
    assert forged.body["reason"] == (
        "406 PRECONDITION_FAILED - user_id property set to 'someone-else' but authenticated "
        "user was 'guest'"
    )
    assert api.get(f"/queues/%2F/{queue}").status == 200
