"""Exchanges, queues and bindings over real sockets: routing and RabbitMQ's error texts."""

import pytest
from hutch_testing.clients import connect, drain
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test


def closed_with(fn, *args, **kwargs) -> tuple[int, str]:
    with pytest.raises(ChannelClosedByBroker) as info:
        fn(*args, **kwargs)
    return info.value.reply_code, info.value.reply_text


def test_direct_fanout_topic_headers_routing(channel):
    for name in ("d", "f", "t1", "t2", "t3", "h_all", "h_any"):
        channel.queue_declare(name)
    channel.queue_bind("d", "amq.direct", "key")
    channel.queue_bind("f", "amq.fanout")
    channel.queue_bind("t1", "amq.topic", "a.*.c")
    channel.queue_bind("t2", "amq.topic", "a.#")
    channel.queue_bind("t3", "amq.topic", "#.c")
    channel.queue_bind("h_all", "amq.headers", arguments={"x-match": "all", "k": "v", "n": 1})
    channel.queue_bind("h_any", "amq.headers", arguments={"x-match": "any", "k": "v", "z": None})
    import pika

    channel.basic_publish("amq.direct", "key", b"d1")
    channel.basic_publish("amq.direct", "other", b"d2")
    channel.basic_publish("amq.fanout", "whatever", b"f1")
    channel.basic_publish("amq.topic", "a.b.c", b"t-abc")
    channel.basic_publish("amq.topic", "a", b"t-a")
    channel.basic_publish("amq.topic", "x.c", b"t-xc")
    channel.basic_publish(
        "amq.headers", "", b"h1", pika.BasicProperties(headers={"k": "v", "n": 1})
    )
    channel.basic_publish("amq.headers", "", b"h2", pika.BasicProperties(headers={"z": "anything"}))
    assert drain(channel, "d") == [b"d1"]
    assert drain(channel, "f") == [b"f1"]
    assert drain(channel, "t1") == [b"t-abc"]
    assert drain(channel, "t2") == [b"t-abc", b"t-a"]
    assert drain(channel, "t3") == [b"t-abc", b"t-xc"]
    assert drain(channel, "h_all") == [b"h1"]
    assert drain(channel, "h_any") == [b"h1", b"h2"]


def test_queue_reached_twice_gets_one_copy(channel):
    channel.queue_declare("q")
    channel.queue_bind("q", "amq.topic", "a.*")
    channel.queue_bind("q", "amq.topic", "#")
    channel.basic_publish("amq.topic", "a.b", b"once")
    assert drain(channel, "q") == [b"once"]


def test_exchange_to_exchange_binding_and_cycle(channel):
    channel.exchange_declare("x1", "fanout")
    channel.exchange_declare("x2", "fanout")
    channel.exchange_bind("x2", "x1")
    channel.exchange_bind("x1", "x2")  # a cycle: each exchange visited once
    channel.queue_declare("q")
    channel.queue_bind("q", "x2")
    channel.basic_publish("x1", "", b"via-e2e")
    assert drain(channel, "q") == [b"via-e2e"]


def test_cc_and_bcc_headers_add_routing_keys(channel):
    import pika

    for name in ("a", "b", "c"):
        channel.queue_declare(name)
    channel.basic_publish("", "a", b"m", pika.BasicProperties(headers={"CC": ["b"], "BCC": ["c"]}))
    _, props_b, _ = channel.basic_get("b", auto_ack=True)
    _, props_c, _ = channel.basic_get("c", auto_ack=True)
    assert drain(channel, "a") == [b"m"]
    assert "BCC" not in props_b.headers and "BCC" not in props_c.headers
    assert props_b.headers["CC"] == [b"b"] or props_b.headers["CC"] == ["b"]


def test_internal_exchange_refuses_publish(channel, vhost):
    channel.exchange_declare("inner", "fanout", internal=True)
    channel.basic_publish("inner", "", b"x")
    code, text = closed_with(channel.queue_declare, "q")
    assert (code, text) == (
        403,
        f"ACCESS_REFUSED - cannot publish to internal exchange 'inner' in vhost '{vhost}'",
    )


def test_reserved_prefixes(connection):
    code, text = closed_with(connection.channel().exchange_declare, "amq.mine", "direct")
    assert (code, text) == (
        403,
        "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'",
    )
    code, text = closed_with(connection.channel().queue_declare, "amq.q")
    assert (code, text) == (
        403,
        "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'",
    )


def test_default_exchange_cannot_be_bound(channel):
    channel.queue_declare("q")
    code, text = closed_with(channel.queue_bind, "q", "", "k")
    assert (code, text) == (403, "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_passive_declares_of_missing_things_are_404(connection, vhost):
    code, text = closed_with(connection.channel().queue_declare, "nope", passive=True)
    assert (code, text) == (404, f"NOT_FOUND - no queue 'nope' in vhost '{vhost}'")
    code, text = closed_with(connection.channel().exchange_declare, "nope", passive=True)
    assert (code, text) == (404, f"NOT_FOUND - no exchange 'nope' in vhost '{vhost}'")


def test_exchange_redeclare_must_be_equivalent(connection, vhost):
    ch = connection.channel()
    ch.exchange_declare("x", "direct")
    code, text = closed_with(ch.exchange_declare, "x", "fanout")
    assert code == 406
    assert (
        text
        == f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x' in vhost '{vhost}': received 'fanout' but current is 'direct'"
    )
    ch = connection.channel()
    code, text = closed_with(ch.exchange_declare, "x", "direct", durable=True)
    assert (
        text
        == f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'x' in vhost '{vhost}': received 'true' but current is 'false'"
    )


def test_unknown_exchange_type_is_406(channel):
    code, text = closed_with(channel.exchange_declare, "x", "nonsense")
    assert (code, text) == (406, "PRECONDITION_FAILED - unknown exchange type 'nonsense'")


def test_queue_argument_equivalence_texts(connection, vhost):
    ch = connection.channel()
    ch.queue_declare("q", arguments={"x-max-length": 1})
    _, text = closed_with(ch.queue_declare, "q", arguments={"x-max-length": 2})
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '{vhost}': "
        "received '2' but current is '1'"
    )
    ch = connection.channel()
    _, text = closed_with(ch.queue_declare, "q")
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '{vhost}': "
        "received none but current is the value '1' of type 'signedint'"
    )
    ch = connection.channel()
    ch.queue_declare(
        "q", arguments={"x-max-length": 1, "x-whatever": "ignored"}
    )  # others not compared


@pytest.mark.parametrize(
    ("arguments", "detail"),  # detail: what follows "in vhost '<the test's vhost>': "
    [
        ({"x-message-ttl": -1}, "{value_negative,-1}"),
        ({"x-message-ttl": "10"}, '"expected integer, got longstr"'),
        ({"x-expires": 0}, "{value_zero,0}"),
        ({"x-max-length": -1}, "{value_negative,-1}"),
        ({"x-overflow": "nope"}, "invalid_overflow"),
        ({"x-dead-letter-routing-key": "k"}, "routing_key_but_no_dlx_defined"),
    ],
)
def test_invalid_queue_arguments(channel, vhost, arguments, detail):
    (name,) = arguments
    code, text = closed_with(channel.queue_declare, "q", arguments=arguments)
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - invalid arg '{name}' for queue 'q' in vhost '{vhost}': {detail}",
    )


def test_invalid_declare_changes_nothing(connection):
    closed_with(connection.channel().queue_declare, "q", arguments={"x-max-length": -1})
    code, _ = closed_with(connection.channel().queue_declare, "q", passive=True)
    assert code == 404


def test_exclusive_queue_is_locked_for_other_connections(hutch_broker, connection, vhost):
    connection.channel().queue_declare("excl", exclusive=True)
    other = connect(hutch_broker, vhost=vhost)
    code, text = closed_with(other.channel().queue_declare, "excl", passive=True)
    assert code == 405 and text.startswith(
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'excl'"
    )
    connection.close()
    code, _ = closed_with(other.channel().queue_declare, "excl", passive=True)
    assert code == 404  # died with its connection
    other.close()


def test_auto_delete_queue_goes_with_last_consumer(connection):
    ch = connection.channel()
    ch.queue_declare("ad", auto_delete=True)
    tag = ch.basic_consume("ad", lambda *a: None)
    ch.basic_cancel(tag)
    code, _ = closed_with(ch.queue_declare, "ad", passive=True)
    assert code == 404


def test_server_named_queue(channel):
    ok = channel.queue_declare("", exclusive=True)
    assert ok.method.queue.startswith("amq.gen-")


def test_purge_and_delete_conditions(connection, vhost):
    ch = connection.channel()
    ch.queue_declare("q")
    for _ in range(3):
        ch.basic_publish("", "q", b"x")
    code, text = closed_with(ch.queue_delete, "q", if_empty=True)
    assert (code, text) == (406, f"PRECONDITION_FAILED - queue 'q' in vhost '{vhost}' is not empty")
    ch = connection.channel()
    assert ch.queue_purge("q").method.message_count == 3
    ch.basic_consume("q", lambda *a: None)
    other = connection.channel()
    code, text = closed_with(other.queue_delete, "q", if_unused=True)
    assert (code, text) == (406, f"PRECONDITION_FAILED - queue 'q' in vhost '{vhost}' in use")
    assert connection.channel().queue_delete("q").method.message_count == 0


def test_unbind_and_exchange_delete(channel):
    channel.exchange_declare("x", "direct")
    channel.queue_declare("q")
    channel.queue_bind("q", "x", "k")
    channel.queue_unbind("q", "x", "k")
    channel.basic_publish("x", "k", b"gone")
    assert drain(channel, "q") == []
    channel.queue_bind("q", "x", "k")
    channel.exchange_delete("x")
    code, _ = closed_with(channel.exchange_declare, "x", passive=True)
    assert code == 404


def test_bad_vhost_and_bad_credentials_are_refused(hutch_broker, vhost):
    import pika

    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as auth:
        connect(hutch_broker, password="wrong", vhost=vhost)
    assert "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN" in str(
        auth.value
    )
    with pytest.raises(
        (ConnectionClosedByBroker, pika.exceptions.ProbableAccessDeniedError)
    ) as info:
        connect(hutch_broker, vhost="nope")
    assert "NOT_ALLOWED - vhost nope not found" in str(info.value)
