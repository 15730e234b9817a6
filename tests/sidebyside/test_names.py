"""Names over HTTP and AMQP on both brokers (issue "Broker trust", items 8 and 12).

RabbitMQ 3.10.8 accepts any UTF-8 queue name (``café``, ``q!``) over HTTP and AMQP, and refuses
an HTTP queue name over 255 bytes with the text Hutch copies.  Hutch also refuses over-long
exchange names and routing keys over HTTP, which RabbitMQ accepts and then cannot deliver; those
refusals are tested in tests/broker/admin/test_http_trust.py, not here.
"""

import pytest
from hutch_demo import management


@pytest.mark.parametrize("suffix", ["café", "q!", "a b"])
def test_item_12_queue_names_with_punctuation_and_non_ascii(target, suffix):
    name = target.name(suffix)
    path = f"/queues/%2F/{management.quote(name)}"
    created = target.api.put(path, {"durable": False})
    shown = target.api.get(path).body["name"]
    channel = target.channel()
    declared = channel.queue_declare(name, passive=True).method.queue
    channel.basic_publish("", name, b"m")
    method, _, body = channel.basic_get(name, auto_ack=True)
    assert (created.status, shown, declared) == (201, name, name)
    assert (method.routing_key, body) == (name, b"m")


def test_item_8_http_queue_name_over_255_bytes(target):
    prefix = target.name("")
    name = prefix + "é" * ((256 - len(prefix.encode())) // 2) + "a" * (len(prefix.encode()) % 2)
    assert len(name.encode()) == 256
    reply = target.api.put(f"/queues/%2F/{management.quote(name)}", {})
    assert (reply.status, reply.body) == (
        400,
        {
            "error": "bad_request",
            "reason": "queue should be less than 255 bytes, actually was 256\n",
        },
    )
    assert target.api.get(f"/queues/%2F/{management.quote(name)}").status == 404
