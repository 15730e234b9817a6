"""Queue length limits and overflow (ML-1..ML-9) and their argument checks (Q-2, Q-3)."""

from decimal import Decimal

import pytest
from hutch_demo.waiting import wait_for
from hutch_testing.steps import (
    ACK,
    NACK,
    closed_by_broker,
    get,
    publish,
    publish_all,
    ready,
)
from hutch_testing.wire import FrameRecorder
from pika.compat import long

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test


def _declare_dlq(channel, dlq="dlq"):
    """A dead-letter queue reached through the default exchange (DLX "" + DLRK)."""
    channel.queue_declare(dlq)
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}


def _drain_with_deaths(channel, queue):
    """(body, reasons of x-death newest first) for each ready message."""
    found = []
    while (got := get(channel, queue)) is not None:
        _method, props, body = got
        deaths = (props.headers or {}).get("x-death", [])
        found.append((body, [death["reason"] for death in deaths]))
    return found


def _drain(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2])
    return found


# -- ML-1 --------------------------------------------------------------------------------------


def test_ml_1_unacked_messages_do_not_count(channel, confirms):
    channel.queue_declare("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})

    assert publish(confirms, "q", "a") == ACK
    taken = get(channel, "q", auto_ack=False)  # 'a' is now unacked, the queue has 0 ready
    assert publish(confirms, "q", "b") == ACK
    assert publish(confirms, "q", "c") == NACK

    assert taken[2] == b"a"
    assert _drain(channel, "q") == [b"b"]


def test_ml_1_byte_limit_counts_body_bytes_only(channel, confirms):
    channel.queue_declare("q", arguments={"x-max-length-bytes": 10, "x-overflow": "reject-publish"})
    big_headers = {"pad": "h" * 5000}

    assert publish(confirms, "q", b"0123456789", headers=big_headers) == ACK
    assert publish(confirms, "q", b"x") == NACK

    assert _drain(channel, "q") == [b"0123456789"]


# -- ML-2 --------------------------------------------------------------------------------------


def test_ml_2_effective_limit_is_the_least_of_argument_policy_and_operator_policy(channel, api):
    api.set_policy("user", "^q$", {"max-length": 3})
    api.set_policy("ops", "^q$", {"max-length": 4}, operator=True)
    channel.queue_declare("q", arguments={"x-max-length": 5})

    publish_all(channel, "q", [str(i) for i in range(10)])

    assert _drain(channel, "q") == [b"7", b"8", b"9"]


def test_ml_2_count_and_byte_limits_whichever_is_hit_first(channel):
    channel.queue_declare("q", arguments={"x-max-length": 10, "x-max-length-bytes": 6})

    publish_all(channel, "q", ["a1", "b2", "c3", "d4", "e5"])

    assert _drain(channel, "q") == [b"c3", b"d4", b"e5"]


# -- ML-3 --------------------------------------------------------------------------------------


def test_ml_3_drop_head_keeps_the_newest_and_dead_letters_with_maxlen(channel, confirms):
    dlx = _declare_dlq(channel)
    channel.queue_declare("q", arguments={"x-max-length": 1, **dlx})

    outcomes = publish_all(confirms, "q", ["1", "2", "3"])

    assert outcomes == [ACK, ACK, ACK]
    assert _drain(channel, "q") == [b"3"]
    assert _drain_with_deaths(channel, "dlq") == [(b"1", ["maxlen"]), (b"2", ["maxlen"])]


# -- ML-4 --------------------------------------------------------------------------------------


def test_ml_4_reject_publish_nacks_and_discards(channel, confirms):
    channel.queue_declare("q", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})

    outcomes = publish_all(confirms, "q", ["1", "2", "3", "4"])

    assert outcomes == [ACK, ACK, NACK, NACK]
    assert _drain(channel, "q") == [b"1", b"2"]


def test_ml_4_reject_publish_never_returns_even_when_mandatory(connection, channel, confirms):
    channel.queue_declare("q", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})

    with FrameRecorder() as recorder:
        outcome = publish(confirms, "q", "x", mandatory=True)

    assert outcome == NACK
    assert "Basic.Return" not in recorder.names()
    assert "Basic.Nack" in recorder.names(confirms.channel_number)


def test_ml_4_reject_publish_without_confirms_drops_silently(connection, channel):
    channel.queue_declare("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})

    publish_all(channel, "q", ["1", "2"])

    assert channel.is_open
    assert _drain(channel, "q") == [b"1"]


def test_ml_4_multi_routed_message_is_nacked_but_enqueued_where_accepted(channel, confirms):
    channel.exchange_declare("fan", "fanout")
    channel.queue_declare("full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    channel.queue_declare("open")
    channel.queue_bind("full", "fan")
    channel.queue_bind("open", "fan")

    assert publish(confirms, "", "m", exchange="fan") == NACK

    assert _drain(channel, "open") == [b"m"]
    assert _drain(channel, "full") == []


# -- ML-5 --------------------------------------------------------------------------------------


def test_ml_5_reject_publish_dlx_nacks_and_dead_letters_with_maxlen(channel, confirms):
    dlx = _declare_dlq(channel)
    channel.queue_declare(
        "q", arguments={"x-max-length": 1, "x-overflow": "reject-publish-dlx", **dlx}
    )

    outcomes = publish_all(confirms, "q", ["1", "2"])

    assert outcomes == [ACK, NACK]
    assert _drain(channel, "q") == [b"1"]
    assert _drain_with_deaths(channel, "dlq") == [(b"2", ["maxlen"])]


# -- ML-6 --------------------------------------------------------------------------------------


def test_ml_6_reject_publish_requeue_may_exceed_the_limit(channel, confirms):
    channel.queue_declare("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    assert publish(confirms, "q", "1") == ACK
    method, _props, _body = get(channel, "q", auto_ack=False)
    assert publish(confirms, "q", "3") == ACK

    channel.basic_nack(method.delivery_tag, requeue=True)

    assert ready(channel, "q") == 2
    assert publish(confirms, "q", "4") == NACK
    assert _drain(channel, "q") == [b"1", b"3"]


def test_ml_6_drop_head_trims_after_requeue_dropping_the_requeued_head(channel):
    dlx = _declare_dlq(channel)
    channel.queue_declare("q", arguments={"x-max-length": 2, **dlx})
    publish_all(channel, "q", ["a", "b"])
    method, _props, body = get(channel, "q", auto_ack=False)
    assert body == b"a"
    publish(channel, "q", "c")

    channel.basic_nack(method.delivery_tag, requeue=True)

    assert _drain(channel, "q") == [b"b", b"c"]
    assert _drain_with_deaths(channel, "dlq") == [(b"a", ["maxlen"])]


# -- ML-7 --------------------------------------------------------------------------------------


def test_ml_7_limit_zero_drop_head_still_feeds_a_waiting_consumer(connection, channel, confirms):
    dlx = _declare_dlq(channel)
    channel.queue_declare("q", arguments={"x-max-length": 0, **dlx})
    assert publish(confirms, "q", "nobody-waiting") == ACK
    consumer = connection.channel()
    got = []
    consumer.basic_consume("q", lambda _c, _m, _p, body: got.append(body), auto_ack=True)

    assert publish(confirms, "q", "waited-for") == ACK
    wait_for(lambda: connection.process_data_events(0.02) or got, what="a delivery")

    assert got == [b"waited-for"]
    assert _drain_with_deaths(channel, "dlq") == [(b"nobody-waiting", ["maxlen"])]


def test_ml_7_limit_zero_reject_publish_nacks_even_with_a_waiting_consumer(
    connection, channel, confirms
):
    channel.queue_declare("q", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    consumer = connection.channel()
    got = []
    consumer.basic_consume("q", lambda _c, _m, _p, body: got.append(body), auto_ack=True)

    assert publish(confirms, "q", "x") == NACK
    connection.process_data_events(time_limit=0.2)

    assert got == []


# -- ML-8 --------------------------------------------------------------------------------------


def test_ml_8_return_and_delivery_come_before_the_confirm(connection, channel, confirms):
    channel.queue_declare("q")
    channel.basic_consume("q", lambda *_: None, auto_ack=True)

    with FrameRecorder() as recorder:
        publish(confirms, "no-such-queue", "lost", mandatory=True)
        publish(confirms, "q", "kept")
        connection.process_data_events(time_limit=0.2)

    names = [name for name in recorder.names() if name != "header"]
    assert names.index("Basic.Return") < names.index("Basic.Ack")
    acks = [index for index, name in enumerate(names) if name == "Basic.Ack"]
    assert names.index("Basic.Deliver") < acks[-1]


# -- ML-9 --------------------------------------------------------------------------------------


def test_ml_9_policy_lowering_max_length_truncates_at_once_with_dead_lettering(channel, api):
    dlx = _declare_dlq(channel)
    channel.queue_declare("q", arguments=dlx)
    api.set_policy("len", "^q$", {"max-length": 10})
    publish_all(channel, "q", [str(i) for i in range(6)])
    assert ready(channel, "q") == 6

    api.set_policy("len", "^q$", {"max-length": 2})

    assert ready(channel, "q") == 2
    assert [body for body, _ in _drain_with_deaths(channel, "dlq")] == [b"0", b"1", b"2", b"3"]
    assert _drain(channel, "q") == [b"4", b"5"]


# -- for the length-limit arguments ----------------------------------------------------


# (the one argument, what follows "invalid arg '<its name>' for queue 'q' in vhost '<vhost>': ")
INVALID_LENGTH_ARGUMENTS = [
    ({"x-max-length": -1}, "{value_negative,-1}"),
    ({"x-max-length-bytes": -1}, "{value_negative,-1}"),
    ({"x-overflow": "drop-tail"}, "invalid_overflow"),
    ({"x-max-length": "ten"}, '"expected integer, got longstr"'),
    ({"x-max-length": Decimal(5)}, '"expected integer, got decimal"'),
    ({"x-overflow": 5}, "{unacceptable_type,signedint}"),
]


def test_q_3_invalid_length_arguments_are_406_and_create_nothing(connection, vhost):
    for arguments, detail in INVALID_LENGTH_ARGUMENTS:
        channel = connection.channel()
        (name,) = arguments

        closed = closed_by_broker(
            lambda ch=channel, args=arguments: ch.queue_declare("q", arguments=args)
        )

        assert closed == (
            406,
            f"PRECONDITION_FAILED - invalid arg '{name}' for queue 'q' in vhost '{vhost}': {detail}",
        )
        missing = connection.channel()
        assert closed_by_broker(lambda ch=missing: ch.queue_declare("q", passive=True))[0] == 404


def test_q_2_length_arguments_must_be_equivalent_on_redeclare(connection, vhost):
    connection.channel().queue_declare("q", arguments={"x-max-length": 1})

    different = closed_by_broker(
        lambda: connection.channel().queue_declare("q", arguments={"x-max-length": 2})
    )
    missing = closed_by_broker(lambda: connection.channel().queue_declare("q"))
    overflow = closed_by_broker(
        lambda: connection.channel().queue_declare(
            "q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
        )
    )

    prefix = (
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '{vhost}': "
    )
    assert different == (406, prefix + "received '2' but current is '1'")
    assert missing == (
        406,
        prefix + "received none but current is the value '1' of type 'signedint'",
    )
    assert overflow[0] == 406
    assert "inequivalent arg 'x-overflow'" in overflow[1]
    # The same value sent as a 64-bit 'l' instead of pika's 32-bit 'I' is equivalent.
    connection.channel().queue_declare("q", arguments={"x-max-length": long(1)})
