"""HTTP publish to a missing exchange: RabbitMQ's 400 with the channel error as its reason.

Tools parse that reason (issue 14); hutch-broker answered a bare 404 before.
"""

from urllib.parse import quote


def test_publish_to_a_missing_exchange_is_a_400_naming_it(target):
    name = target.name("missing")
    body = {"properties": {}, "routing_key": "k", "payload": "x", "payload_encoding": "string"}
    reply = target.api.post(f"/exchanges/%2F/{quote(name, safe='')}/publish", body)
    assert reply.status == 400
    assert reply.body == {
        "error": "bad_request",
        "reason": f"404 NOT_FOUND - no exchange '{name}' in vhost '/'",
    }
