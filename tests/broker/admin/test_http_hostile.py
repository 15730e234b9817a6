"""Broker trust II, item 13: a body that is not UTF-8 is not JSON, on every endpoint with a body.

Python's ``json.loads`` decodes bytes with ``surrogatepass``, so the CESU-8 bytes of a lone
surrogate (``ED A0 80``) became the string ``"\\ud800"`` and were accepted as names, keys,
passwords and payloads that no UTF-8 encoder (AMQP frames, the definitions file) can write.
Each refusal is RabbitMQ's 400 ``not_json``, and nothing changes.
"""

import pytest

LONE_SURROGATE = b"\xed\xa0\x80"  # U+D800 as CESU-8: not UTF-8
NOT_UTF8 = b"\xff"

ENDPOINTS = [
    ("PUT", "/api/queues/%2F/q2", b'{"arguments":{"x-note":"%s"}}'),
    ("PUT", "/api/exchanges/%2F/x2", b'{"type":"direct","arguments":{"%s":1}}'),
    ("PUT", "/api/vhosts/v2", b'{"description":"%s"}'),
    ("PUT", "/api/users/u2", b'{"password":"%s","tags":""}'),
    ("PUT", "/api/permissions/%2F/guest", b'{"configure":"%s","write":".*","read":".*"}'),
    ("PUT", "/api/policies/%2F/p2", b'{"pattern":"%s","definition":{"max-length":1}}'),
    ("PUT", "/api/parameters/vhost-limits/%2F/limits", b'{"value":{"%s":1}}'),
    ("POST", "/api/definitions", b'{"queues":[{"name":"q%s","vhost":"/","durable":true}]}'),
    ("POST", "/api/bindings/%2F/e/x/q/q", b'{"routing_key":"%s"}'),
    (
        "POST",
        "/api/exchanges/%2F/amq.default/publish",
        b'{"properties":{},"routing_key":"q","payload":"%s","payload_encoding":"string"}',
    ),
]


@pytest.mark.parametrize("bad", [LONE_SURROGATE, NOT_UTF8], ids=["lone-surrogate", "not-utf8"])
@pytest.mark.parametrize(("method", "path", "template"), ENDPOINTS, ids=lambda v: str(v)[:40])
async def test_a_body_that_is_not_utf8_is_not_json(api, broker, method, path, template, bad):
    assert (await api.put("/api/queues/%2F/q", {})).status == 201
    assert (await api.put("/api/exchanges/%2F/x", {"type": "fanout"})).status == 201
    before = broker.export_definitions(), broker.vhosts["/"].queues["q"].ready_count
    reply = await api.call(method, path, raw=template.replace(b"%s", bad))
    assert (reply.status, reply.body) == (400, {"error": "bad_request", "reason": "not_json"})
    assert (broker.export_definitions(), broker.vhosts["/"].queues["q"].ready_count) == before


async def test_utf8_bodies_still_pass(api, broker):
    reply = await api.call("PUT", "/api/queues/%2F/caf%C3%A9", raw=b'{"durable":true}')
    assert reply.status == 201
    raw = '{"arguments":{"x-note":"café \U0001f600"}}'.encode()
    assert (await api.call("PUT", "/api/queues/%2F/q3", raw=raw)).status == 201
    assert broker.vhosts["/"].queues["q3"].arguments["x-note"] == "café \U0001f600"
