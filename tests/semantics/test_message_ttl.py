"""Message TTL (TTL-1..TTL-7) and expiry across a restart (P-4).

TTLs are a few hundred milliseconds and every wait is a bounded poll, so the tests take well under
a second each on any machine that can run the broker at all.
"""

import time

import pytest
from hutch_demo.waiting import sleep_until, wait_for
from hutch_testing.clients import connect
from hutch_testing.steps import ACK, closed_by_broker, get, publish, ready
from hutch_testing.wire import FrameRecorder

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test

SHORT = 200  # ms: a TTL that expires during the test
LONG = 60_000  # ms: one that does not


def _dead_letter_args(channel, dlq="dlq"):
    channel.queue_declare(dlq)
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}


def _gone(channel, queue):
    """Wait until the head timer removed every ready message of ``queue``."""
    wait_for(lambda: ready(channel, queue), lambda count: count == 0, what=f"{queue} to empty")


# -- TTL-1 -------------------------------------------------------------------------------------


def test_ttl_1_the_lower_of_queue_ttl_and_expiration_wins(channel):
    channel.queue_declare("queue-ttl-lower", arguments={"x-message-ttl": SHORT})
    channel.queue_declare("expiration-lower", arguments={"x-message-ttl": LONG})
    channel.queue_declare("neither")
    publish(channel, "queue-ttl-lower", "a", expiration=str(LONG))
    publish(channel, "expiration-lower", "b", expiration=str(SHORT))
    publish(channel, "neither", "c", expiration=str(LONG))

    _gone(channel, "queue-ttl-lower")
    _gone(channel, "expiration-lower")

    assert get(channel, "neither")[2] == b"c"


def test_ttl_1_policy_and_operator_policy_message_ttl_apply(channel, api):
    api.set_policy("user", "^by-policy$", {"message-ttl": SHORT})
    api.set_policy("ops", "^by-operator$", {"message-ttl": SHORT}, operator=True)
    api.set_policy("loose", "^capped$", {"message-ttl": LONG})
    for queue in ("by-policy", "by-operator", "capped"):
        channel.queue_declare(queue, arguments={"x-message-ttl": LONG} if queue != "capped" else {})
        publish(channel, queue, "m")

    _gone(channel, "by-policy")
    _gone(channel, "by-operator")

    assert ready(channel, "capped") == 1


# -- TTL-2 -------------------------------------------------------------------------------------


MALFORMED_EXPIRATIONS = [
    ("foo", "no_integer"),
    ("-1", "{value_negative,-1}"),
    ("1.5", '{leftover_string,".5"}'),
    ("315360000001", "{value_too_large,315360000001}"),
    ("-1x", '{leftover_string,"x"}'),
    ("", "no_integer"),
]


def test_ttl_2_malformed_expiration_is_406(connection):
    connection.channel().queue_declare("q")
    for expiration, detail in MALFORMED_EXPIRATIONS:
        channel = connection.channel()

        closed = closed_by_broker(
            lambda ch=channel, value=expiration: (
                publish(ch, "q", "m", expiration=value),
                ch.queue_declare("q"),
            )
        )

        assert closed == (406, f"PRECONDITION_FAILED - invalid expiration '{expiration}': {detail}")
    assert ready(connection.channel(), "q") == 0


def test_ttl_1_x_message_ttl_above_ten_years_is_406(connection, vhost):
    limit = 315_360_000_000

    closed = closed_by_broker(
        lambda: connection.channel().queue_declare("q", arguments={"x-message-ttl": limit + 1})
    )
    connection.channel().queue_declare("max", arguments={"x-message-ttl": limit})

    assert closed == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '{vhost}': "
        f"{{value_too_large,{limit + 1}}}",
    )


def test_ttl_2_the_largest_and_signed_expirations_are_accepted(channel):
    channel.queue_declare("q")
    publish(channel, "q", "max", expiration="315360000000")
    publish(channel, "q", "plus", expiration=f"+{SHORT}")
    publish(channel, "q", "minus-zero", expiration="-0")

    assert get(channel, "q")[2] == b"max"
    _gone(channel, "q")  # "+200" and "-0" are TTLs of 200 and 0 ms, as RabbitMQ parses them


# -- TTL-3 -------------------------------------------------------------------------------------


def test_ttl_3_expired_message_behind_a_live_one_counts_until_it_reaches_the_head(channel):
    channel.queue_declare("q")
    publish(channel, "q", "lives")
    publish(channel, "q", "dies", expiration=str(SHORT))
    sleep_until(time.monotonic() + 2 * SHORT / 1000)  # the second one is now expired

    assert ready(channel, "q") == 2
    assert get(channel, "q")[2] == b"lives"
    assert get(channel, "q") is None
    assert ready(channel, "q") == 0


def test_ttl_3_an_expired_message_is_skipped_when_it_reaches_a_consumer(connection, channel):
    channel.queue_declare("q")
    publish(channel, "q", "first")
    publish(channel, "q", "dies", expiration=str(SHORT))
    publish(channel, "q", "last")
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=1)
    got = []
    consumer.basic_consume("q", lambda _c, method, _p, body: got.append((method, body)))
    wait_for(lambda: connection.process_data_events(0.02) or list(got), what="the first delivery")
    sleep_until(time.monotonic() + 2 * SHORT / 1000)  # "dies" expires behind the unacked head

    consumer.basic_ack(got[0][0].delivery_tag)
    wait_for(lambda: connection.process_data_events(0.02) or list(got), lambda g: len(g) == 2)
    connection.process_data_events(time_limit=0.1)

    assert [body for _method, body in got] == [b"first", b"last"]


# -- TTL-4 -------------------------------------------------------------------------------------


def test_ttl_4_ttl_zero_reaches_a_waiting_consumer(connection, channel):
    channel.queue_declare("q", arguments={"x-message-ttl": 0})
    consumer = connection.channel()
    got = []
    consumer.basic_consume("q", lambda _c, _m, _p, body: got.append(body), auto_ack=True)

    publish(channel, "q", "now")

    assert wait_for(lambda: connection.process_data_events(0.02) or got) == [b"now"]


def test_ttl_4_ttl_zero_without_a_consumer_dead_letters_and_is_not_returned(
    connection, channel, confirms
):
    args = _dead_letter_args(channel)
    channel.queue_declare("q", arguments={"x-message-ttl": 0, **args})

    with FrameRecorder() as recorder:
        outcome = publish(confirms, "q", "m", mandatory=True)

    assert outcome == ACK
    assert "Basic.Return" not in recorder.names()
    assert ready(channel, "q") == 0
    _method, props, body = get(channel, "dlq")
    assert body == b"m"
    assert props.headers["x-death"][0]["reason"] == "expired"


def test_ttl_4_a_requeued_ttl_zero_message_expires(connection, channel):
    args = _dead_letter_args(channel)
    channel.queue_declare("q", arguments={"x-message-ttl": 0, **args})
    consumer = connection.channel()
    got = []
    consumer.basic_consume("q", lambda _c, method, _p, body: got.append(method))
    publish(channel, "q", "m")
    (method,) = wait_for(lambda: connection.process_data_events(0.02) or got)

    consumer.basic_nack(method.delivery_tag, requeue=True)
    connection.process_data_events(time_limit=0.2)

    assert len(got) == 1  # never redelivered
    assert wait_for(lambda: get(channel, "dlq"))[2] == b"m"


# -- TTL-5 and P-4 -----------------------------------------------------------------------------


def test_ttl_5_requeue_keeps_the_original_expiry(channel):
    ttl = 600
    args = _dead_letter_args(channel)
    channel.queue_declare("q", arguments={"x-message-ttl": ttl, **args})
    published = time.monotonic()
    publish(channel, "q", "m")
    method, _props, _body = get(channel, "q", auto_ack=False)
    sleep_until(published + 1.5 * ttl / 1000)

    channel.basic_nack(method.delivery_tag, requeue=True)

    assert get(channel, "q") is None
    _method, props, body = wait_for(lambda: get(channel, "dlq"))
    assert body == b"m"
    assert props.headers["x-death"][0]["reason"] == "expired"


@pytest.mark.own_broker  # it restarts the broker
def test_p_4_expiry_survives_a_restart_and_is_not_reset(hutch_broker):
    ttl = 1500
    connection = connect(hutch_broker)
    channel = connection.channel()
    channel.queue_declare("dlq", durable=True)
    channel.queue_declare(
        "q",
        durable=True,
        arguments={
            "x-message-ttl": ttl,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dlq",
        },
    )
    channel.queue_declare("keep", durable=True)
    published = time.monotonic()
    publish(channel, "q", "old", delivery_mode=2)
    publish(channel, "keep", "stays", delivery_mode=2, expiration=str(LONG))
    connection.close()

    hutch_broker.stop()
    sleep_until(published + 1.2 * ttl / 1000)  # expired while the broker was down
    hutch_broker.start()

    channel = connect(hutch_broker).channel()
    assert get(channel, "q") is None
    _method, props, body = wait_for(lambda: get(channel, "dlq"))
    assert body == b"old"
    assert props.headers["x-death"][0]["reason"] == "expired"
    assert get(channel, "keep")[2] == b"stays"


# -- TTL-6 -------------------------------------------------------------------------------------


def test_ttl_6_a_new_message_ttl_policy_is_not_retroactive(channel, api):
    channel.queue_declare("q")
    for index in range(5):
        publish(channel, "q", f"old{index}")

    api.set_policy("ttl", "^q$", {"message-ttl": SHORT})
    for index in range(3):
        publish(channel, "q", f"new{index}")
    sleep_until(time.monotonic() + 2 * SHORT / 1000)

    assert ready(channel, "q") == 8
    fetched = [get(channel, "q")[2] for _ in range(5)]
    assert fetched == [f"old{index}".encode() for index in range(5)]
    assert get(channel, "q") is None


# -- TTL-7 -------------------------------------------------------------------------------------


def test_ttl_7_dead_lettered_on_expiry_with_original_expiration_for_per_message_ttl(channel):
    args = _dead_letter_args(channel)
    channel.queue_declare("per-message", arguments=args)
    channel.queue_declare("per-queue", arguments={"x-message-ttl": 100, **args})

    publish(channel, "per-message", "pm", expiration="100")
    _gone(channel, "per-message")
    publish(channel, "per-queue", "pq")
    _gone(channel, "per-queue")

    first = wait_for(lambda: get(channel, "dlq"))
    second = wait_for(lambda: get(channel, "dlq"))
    (_m1, props1, body1), (_m2, props2, body2) = first, second
    assert (body1, body2) == (b"pm", b"pq")
    assert props1.expiration is None
    assert props2.expiration is None
    death1, death2 = props1.headers["x-death"][0], props2.headers["x-death"][0]
    assert (death1["reason"], death1["queue"]) == ("expired", "per-message")
    assert death1["original-expiration"] == "100"
    assert (death2["reason"], death2["queue"]) == ("expired", "per-queue")
    assert "original-expiration" not in death2
