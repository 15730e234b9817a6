"""Durability over real restarts and SIGKILL (P-1, P-2, P-3): nothing confirmed is lost."""

import hashlib
import random
import signal
import threading

import pika
import pytest
from hutch_testing.clients import connect, drain
from pika.exceptions import AMQPError, ChannelClosedByBroker

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def body_for(n: int) -> bytes:
    payload = (b"%08d" % n) * 64
    return b"%08d:" % n + hashlib.sha256(payload).hexdigest().encode() + b":" + payload


def parse(body: bytes) -> int:
    number, digest, payload = body.split(b":", 2)
    assert hashlib.sha256(payload).hexdigest().encode() == digest, "corrupted message served"
    return int(number)


def test_definitions_survive_restart(hutch_broker):
    conn = connect(hutch_broker)
    ch = conn.channel()
    ch.exchange_declare("dx", "topic", durable=True)
    ch.exchange_declare("tx", "topic", durable=False)
    ch.queue_declare("dq", durable=True, arguments={"x-max-length": 7})
    ch.queue_declare("tq", durable=False)
    ch.queue_bind("dq", "dx", "a.#")
    conn.close()
    hutch_broker.restart()
    ch = connect(hutch_broker).channel()
    ok = ch.queue_declare("dq", durable=True, arguments={"x-max-length": 7})  # equivalent: no error
    assert ok.method.message_count == 0
    ch.basic_publish("dx", "a.b", b"routed after restart")
    assert drain(ch, "dq") == [b"routed after restart"]
    with pytest.raises(ChannelClosedByBroker):
        ch.queue_declare("tq", passive=True)


def test_persistent_messages_survive_restart_transient_do_not(hutch_broker):
    conn = connect(hutch_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("dq", durable=True)
    ch.queue_declare("tq", durable=False)
    for i in range(100):
        ch.basic_publish("", "dq", body_for(i), PERSISTENT)
    ch.basic_publish("", "dq", b"transient")
    ch.basic_publish("", "tq", b"in transient queue", PERSISTENT)
    method, _, _ = ch.basic_get("dq")  # unacked at shutdown: comes back
    assert method is not None
    conn.close()
    hutch_broker.restart()
    ch = connect(hutch_broker).channel()
    bodies = drain(ch, "dq")
    assert [parse(b) for b in bodies] == list(range(100))


def test_acked_messages_stay_acked_after_kill(hutch_broker):
    conn = connect(hutch_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("dq", durable=True)
    for i in range(20):
        ch.basic_publish("", "dq", body_for(i), PERSISTENT)
    for _ in range(10):
        method, _, _ = ch.basic_get("dq")
        ch.basic_ack(method.delivery_tag)
    ch.queue_declare("dq", durable=True, passive=True)  # round trip: acks processed
    hutch_broker.kill(signal.SIGKILL)
    hutch_broker.start()
    ch = connect(hutch_broker).channel()
    # A lost ack record could only cause a redelivery; an acked message must not be lost either way.
    assert [parse(b) for b in drain(ch, "dq")][-10:] == list(range(10, 20))


def _publish_until_killed(broker, start: int, confirmed: list[int]) -> None:
    try:
        conn = connect(broker)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("crash", durable=True)
        n = start
        while True:
            ch.basic_publish("", "crash", body_for(n), PERSISTENT)
            confirmed.append(n)  # basic_publish returned: the broker acked it
            n += 1
    except (AMQPError, OSError):
        return


@pytest.mark.slow
def test_kill_minus_nine_loses_no_confirmed_message(hutch_broker):
    rng = random.Random(20261122)
    confirmed: list[int] = []
    next_id = 0
    for _cycle in range(12):
        before = len(confirmed)
        killer = threading.Timer(rng.uniform(0.3, 1.2), hutch_broker.kill, args=(signal.SIGKILL,))
        killer.start()
        _publish_until_killed(hutch_broker, next_id, confirmed)
        killer.join()
        assert len(confirmed) > before, "no publish was confirmed in a cycle"
        next_id = confirmed[-1] + 1000  # ids unique across cycles
        hutch_broker.start()
    ch = connect(hutch_broker).channel()
    recovered = [parse(b) for b in drain(ch, "crash", limit=10_000_000)]
    missing = set(confirmed) - set(recovered)
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    assert recovered == sorted(recovered), "recovered out of publish order"
