"""Length limits, overflow, message TTL and queue expiry side by side (ML-*, TTL-*, EXP-*)."""

import time

import pytest
from hutch_demo.waiting import sleep_until, wait_for
from hutch_testing.steps import ACK, NACK, closed_by_broker, get, publish, ready
from hutch_testing.wire import FrameRecorder

pytestmark = pytest.mark.rabbitmq


def _bodies(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2].decode())
    return found


def _deaths(channel, queue):
    """(body, [(queue, reason, count)...]) of every ready message, newest death first."""
    found = []
    while (got := get(channel, queue)) is not None:
        deaths = got[1].headers["x-death"]
        found.append((got[2].decode(), [(d["queue"], d["reason"], d["count"]) for d in deaths]))
    return found


def _arrived(channel, queue, count=1):
    """Wait for ``count`` ready messages: RabbitMQ dead-letters asynchronously."""
    wait_for(lambda: ready(channel, queue), lambda n: n == count, what=f"{count} in {queue}")


def _with_dlq(target, channel):
    dlq = target.name("dlq")
    channel.queue_declare(dlq)
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}


# -- length limits -----------------------------------------------------------------------------


def test_ml_1_unacked_do_not_count_and_bytes_are_body_bytes(target):
    ch = target.channel()
    by_count, by_bytes = target.name("count"), target.name("bytes")
    ch.queue_declare(by_count, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.queue_declare(by_bytes, arguments={"x-max-length-bytes": 10, "x-overflow": "reject-publish"})

    outcomes = [publish(ch, by_count, "a")]
    get(ch, by_count, auto_ack=False)
    outcomes += [publish(ch, by_count, "b"), publish(ch, by_count, "c")]
    outcomes += [
        publish(ch, by_bytes, "0123456789", headers={"pad": "h" * 5000}),
        publish(ch, by_bytes, "x"),
    ]

    assert outcomes == [ACK, ACK, NACK, ACK, NACK]
    assert (_bodies(ch, by_count), _bodies(ch, by_bytes)) == (["b"], ["0123456789"])


def test_ml_3_drop_head_seed_and_dead_letters(target):
    ch = target.channel()
    dl = _with_dlq(target, ch)
    q = target.name("q")
    ch.queue_declare(q, arguments={"x-max-length": 1, **dl})

    for body in "123":
        publish(ch, q, body)
    _arrived(ch, target.name("dlq"), 2)

    assert _bodies(ch, q) == ["3"]
    assert _deaths(ch, target.name("dlq")) == [
        ("1", [(q, "maxlen", 1)]),
        ("2", [(q, "maxlen", 1)]),
    ]


def test_ml_4_reject_publish_nack_no_return_and_multi_route(target):
    connection = target.connection
    ch = connection.channel()
    ch.confirm_delivery()
    fan, full, open_ = target.name("fan"), target.name("full"), target.name("open")
    ch.exchange_declare(fan, "fanout")
    ch.queue_declare(full, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.queue_declare(open_)
    ch.queue_bind(full, fan)
    ch.queue_bind(open_, fan)

    with FrameRecorder() as recorder:
        outcomes = [publish(ch, "", body, exchange=fan, mandatory=True) for body in ("1", "2")]

    assert outcomes == [ACK, NACK]
    assert "Basic.Return" not in recorder.names()
    assert (_bodies(ch, full), _bodies(ch, open_)) == (["1"], ["1", "2"])


def test_ml_5_reject_publish_dlx(target):
    ch = target.channel()
    dl = _with_dlq(target, ch)
    q = target.name("q")
    ch.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish-dlx", **dl})

    outcomes = [publish(ch, q, body) for body in "12"]
    _arrived(ch, target.name("dlq"))

    assert outcomes == [ACK, NACK]
    assert _deaths(ch, target.name("dlq")) == [("2", [(q, "maxlen", 1)])]


def test_ml_6_requeue_may_exceed_the_limit(target):
    ch = target.channel()
    reject, drop = target.name("reject"), target.name("drop")
    dl = _with_dlq(target, ch)
    ch.queue_declare(reject, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.queue_declare(drop, arguments={"x-max-length": 2, **dl})

    publish(ch, reject, "1")
    first = get(ch, reject, auto_ack=False)[0]
    publish(ch, reject, "3")
    ch.basic_nack(first.delivery_tag, requeue=True)
    for body in "ab":
        publish(ch, drop, body)
    head = get(ch, drop, auto_ack=False)[0]
    publish(ch, drop, "c")
    ch.basic_nack(head.delivery_tag, requeue=True)
    _arrived(ch, target.name("dlq"))

    assert _bodies(ch, reject) == ["1", "3"]
    assert _bodies(ch, drop) == ["b", "c"]
    assert [body for body, _ in _deaths(ch, target.name("dlq"))] == ["a"]


def test_ml_7_limit_zero(target):
    connection = target.connection
    ch = connection.channel()
    ch.confirm_delivery()
    drop, reject = target.name("drop"), target.name("reject")
    ch.queue_declare(drop, arguments={"x-max-length": 0})
    ch.queue_declare(reject, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    got = []
    consumer = connection.channel()
    for queue in (drop, reject):
        consumer.basic_consume(queue, lambda _c, _m, _p, body: got.append(body), auto_ack=True)

    outcomes = [publish(ch, drop, "to-consumer"), publish(ch, reject, "refused")]
    wait_for(lambda: connection.process_data_events(0.02) or list(got))
    connection.process_data_events(time_limit=0.2)

    assert outcomes == [ACK, NACK]
    assert got == [b"to-consumer"]


def test_ml_9_lowering_max_length_by_policy_truncates(target):
    ch = target.channel()
    dl = _with_dlq(target, ch)
    q = target.name("q")
    ch.queue_declare(q, arguments=dl)
    for index in range(6):
        publish(ch, q, str(index))

    target.api.set_policy(target.name("len"), target.anchored("q"), {"max-length": 2})

    _arrived(ch, q, 2)
    _arrived(ch, target.name("dlq"), 4)
    assert _bodies(ch, q) == ["4", "5"]
    assert [body for body, _ in _deaths(ch, target.name("dlq"))] == ["0", "1", "2", "3"]


# -- message TTL -------------------------------------------------------------------------------


def test_ttl_1_lower_of_queue_ttl_and_expiration_wins(target):
    ch = target.channel()
    short_queue, short_message, neither = (
        target.name(s) for s in ("short-queue", "short-message", "neither")
    )
    ch.queue_declare(short_queue, arguments={"x-message-ttl": 100})
    ch.queue_declare(short_message, arguments={"x-message-ttl": 60_000})
    ch.queue_declare(neither)
    publish(ch, short_queue, "a", expiration="60000")
    publish(ch, short_message, "b", expiration="100")
    publish(ch, neither, "c", expiration="60000")

    for queue in (short_queue, short_message):
        wait_for(lambda q=queue: ready(ch, q), lambda count: count == 0, what=f"{queue} empty")

    assert _bodies(ch, neither) == ["c"]


def test_ttl_2_invalid_expiration_texts(target):
    connection = target.connection
    q = target.name("q")
    connection.channel().queue_declare(q)
    cases = {
        "foo": "no_integer",
        "-1": "{value_negative,-1}",
        "1.5": '{leftover_string,".5"}',
        "315360000001": "{value_too_large,315360000001}",
        "-1x": '{leftover_string,"x"}',
        "": "no_integer",
    }

    observed = {}
    for expiration in cases:
        channel = connection.channel()
        observed[expiration] = closed_by_broker(
            lambda ch=channel, value=expiration: (
                publish(ch, q, "m", expiration=value),
                ch.queue_declare(q),
            )
        )

    accepted = connection.channel()
    # Leading zeros parse ("0060000" is 60 s); a short TTL here (it was "007", 7 ms) raced the
    # get below on a loaded machine and expired first.
    for expiration in ("+60000", "-0", "0060000"):
        publish(accepted, q, expiration, expiration=expiration)

    assert observed == {
        value: (406, f"PRECONDITION_FAILED - invalid expiration '{value}': {detail}")
        for value, detail in cases.items()
    }
    assert _bodies(accepted, q) == ["+60000", "0060000"]  # "-0" is a TTL of 0: expired


def test_ttl_3_and_6_expiry_only_at_the_head_and_policy_not_retroactive(target):
    ch = target.channel()
    q, p = target.name("q"), target.name("p")
    ch.queue_declare(q)
    ch.queue_declare(p)
    publish(ch, q, "lives")
    publish(ch, q, "dies", expiration="100")
    for index in range(3):
        publish(ch, p, f"old{index}")
    target.api.set_policy(target.name("ttl"), target.anchored("p"), {"message-ttl": 100})
    for index in range(2):
        publish(ch, p, f"new{index}")
    sleep_until(time.monotonic() + 0.4)

    assert (ready(ch, q), ready(ch, p)) == (2, 5)
    assert _bodies(ch, q) == ["lives"]
    assert _bodies(ch, p) == ["old0", "old1", "old2"]


def test_ttl_4_ttl_zero(target):
    connection = target.connection
    ch = connection.channel()
    dl = _with_dlq(target, ch)
    waiting, idle = target.name("waiting"), target.name("idle")
    ch.queue_declare(waiting, arguments={"x-message-ttl": 0})
    ch.queue_declare(idle, arguments={"x-message-ttl": 0, **dl})
    got = []
    connection.channel().basic_consume(
        waiting, lambda _c, _m, _p, body: got.append(body), auto_ack=True
    )

    publish(ch, waiting, "taken")
    publish(ch, idle, "expired")
    wait_for(lambda: connection.process_data_events(0.02) or list(got))

    assert got == [b"taken"]
    dead = wait_for(lambda: get(ch, target.name("dlq")))
    assert dead[2] == b"expired"
    assert dead[1].headers["x-death"][0]["reason"] == "expired"


def test_ttl_5_requeue_keeps_the_original_expiry(target):
    ch = target.channel()
    dl = _with_dlq(target, ch)
    q = target.name("q")
    # 1.5 s, not the 0.3 s it was: the get must come before the TTL, on a loaded machine too.
    ch.queue_declare(q, arguments={"x-message-ttl": 1500, **dl})
    published = time.monotonic()
    publish(ch, q, "m")
    got = get(ch, q, auto_ack=False)
    assert got is not None, "the message expired before the get: the machine stalled 1.5 s"
    method = got[0]
    sleep_until(published + 1.8)

    ch.basic_nack(method.delivery_tag, requeue=True)
    # At once, before any wait: a requeue that restarted the TTL would still hold the message here.
    assert get(ch, q) is None, "the requeued message outlived the expiry it had before the requeue"
    _arrived(ch, target.name("dlq"))

    assert _deaths(ch, target.name("dlq")) == [("m", [(q, "expired", 1)])]


def test_ttl_7_original_expiration_and_expiration_removed(target):
    ch = target.channel()
    dl = _with_dlq(target, ch)
    q = target.name("q")
    ch.queue_declare(q, arguments=dl)
    publish(ch, q, "m", expiration="50")

    _method, props, body = wait_for(lambda: get(ch, target.name("dlq")))

    assert body == b"m"
    assert props.expiration is None
    death = props.headers["x-death"][0]
    assert (death["reason"], death["original-expiration"]) == ("expired", "50")


# -- queue expiry ------------------------------------------------------------------------------


def test_exp_2_unused_queue_goes_with_its_messages_and_publishing_does_not_renew(target):
    ch = target.channel()
    q, renewed = target.name("q"), target.name("renewed")
    dl = _with_dlq(target, ch)
    ch.queue_declare(q, arguments={"x-expires": 400, **dl})
    # ``renewed``'s lease is longer than q's (it was the same 400 ms) and the loop renews it
    # with a passive declare each turn until past that lease: a turn is an HTTP call, a publish
    # and a declare, and 400 ms between two renewals is a stall a loaded machine can have.
    ch.queue_declare(renewed, arguments={"x-expires": 1500})
    declared = time.monotonic()

    q_gone = False
    while not q_gone or time.monotonic() - declared < 2.0:
        assert time.monotonic() - declared < 10, "the queue never expired"
        q_gone = q_gone or not target.api.queue_exists(q)
        if not q_gone:
            publish(ch, q, "does-not-renew")
        ch.queue_declare(renewed, passive=True)
        time.sleep(0.05)

    assert target.api.queue_exists(renewed)
    assert get(ch, target.name("dlq")) is None
    wait_for(lambda: target.api.queue_exists(renewed), lambda exists: not exists, what="expiry")
