"""Priority queues across restarts (P-2): persistent messages come back in priority order.

The store keeps one log per queue in publish order; recovery pushes each record back into its
priority level, so what a consumer sees after a crash is the order it would have seen before.
"""

import signal

import pika
import pytest
from hutch_testing.clients import connect, drain

PAIRS = [("l1", 1), ("h1", 7), ("n1", None), ("h2", 9), ("l2", 1), ("t", 3)]
EXPECTED = [b"h1", b"h2", b"t", b"l1", b"l2", b"n1"]  # max 7: priority 9 counts as 7


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_persistent_messages_recover_in_priority_order(hutch_broker, how):
    ch = connect(hutch_broker).channel()
    ch.confirm_delivery()
    ch.queue_declare("pq", durable=True, arguments={"x-max-priority": 7})
    for body, priority in PAIRS:
        props = pika.BasicProperties(delivery_mode=2, priority=priority)
        ch.basic_publish("", "pq", body.encode(), props)  # confirmed: on disk
    ch.basic_publish("", "pq", b"transient", pika.BasicProperties(priority=7))
    method, _, _ = ch.basic_get("pq")  # h1, unacked at the crash: comes back in its place
    assert method is not None
    if how == "sigkill":
        hutch_broker.kill(signal.SIGKILL)
        hutch_broker.start()
    else:
        hutch_broker.restart()  # SIGTERM, a clean shutdown

    ch = connect(hutch_broker).channel()
    declared = ch.queue_declare("pq", durable=True, arguments={"x-max-priority": 7})
    assert declared.method.message_count == len(PAIRS)
    assert drain(ch, "pq") == EXPECTED
