"""Unbinding when either end is gone answers unbind-ok, as RabbitMQ 3.10.8 does (issue 14).

aio-pika's RPC pattern and any idempotent clean-up code unbind after the other side may have
been deleted; a 404 there closed the channel on hutch-broker only.
"""

import pytest


@pytest.mark.parametrize("gone", ["exchange", "queue", "both"])
def test_queue_unbind_with_an_end_gone_is_ok(target, gone):
    ch = target.channel()
    x, q = target.name("x"), target.name("q")
    ch.exchange_declare(x, "direct")
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    if gone in ("exchange", "both"):
        ch.exchange_delete(x)
    if gone in ("queue", "both"):
        ch.queue_delete(q)
    ch.queue_unbind(q, x, "k")  # raises ChannelClosedByBroker on a 404
    assert ch.is_open


@pytest.mark.parametrize("gone", ["source", "destination", "both"])
def test_exchange_unbind_with_an_end_gone_is_ok(target, gone):
    ch = target.channel()
    src, dst = target.name("src"), target.name("dst")
    ch.exchange_declare(src, "fanout")
    ch.exchange_declare(dst, "fanout")
    ch.exchange_bind(dst, src, "")
    if gone in ("source", "both"):
        ch.exchange_delete(src)
    if gone in ("destination", "both"):
        ch.exchange_delete(dst)
    ch.exchange_unbind(dst, src, "")
    assert ch.is_open


def test_unbind_still_removes_a_binding_and_checks_nothing_else(target):
    ch = target.channel()
    x, q = target.name("x"), target.name("q")
    ch.exchange_declare(x, "direct")
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    ch.queue_unbind(q, x, "k")
    ch.basic_publish(x, "k", b"unrouted now")
    assert ch.queue_declare(q, passive=True).method.message_count == 0
