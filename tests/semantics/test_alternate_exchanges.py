"""Alternate exchanges (AE-1..AE-4)."""

import pytest
from hutch_demo.management import quote
from hutch_testing.clients import connect
from hutch_testing.steps import ACK, RETURNED, closed_by_broker, get, publish
from hutch_testing.wire import FrameRecorder

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test


def _catch_all(channel, exchange="ae", queue="unrouted"):
    """A fanout AE with one queue behind it."""
    channel.exchange_declare(exchange, "fanout")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange)


def _bodies(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2])
    return found


# -- AE-1 --------------------------------------------------------------------------------------


def test_ae_1_argument_and_policy_key_and_the_argument_wins(channel, api):
    _catch_all(channel, "ae-arg", "via-arg")
    _catch_all(channel, "ae-pol", "via-pol")
    channel.exchange_declare("x-arg", "direct", arguments={"alternate-exchange": "ae-arg"})
    channel.exchange_declare("x-pol", "direct")
    channel.exchange_declare("not-x", "direct", arguments={"x-alternate-exchange": "ae-arg"})
    api.set_policy("ae", "^x-", {"alternate-exchange": "ae-pol"}, apply_to="exchanges")

    publish(channel, "k", "to-arg", exchange="x-arg")
    publish(channel, "k", "to-pol", exchange="x-pol")
    publish(channel, "k", "nowhere", exchange="not-x")  # the argument has no "x-" prefix

    assert _bodies(channel, "via-arg") == [b"to-arg"]
    assert _bodies(channel, "via-pol") == [b"to-pol"]


def test_ae_1_a_policy_gives_amq_exchanges_an_alternate_but_never_the_default(channel, api):
    _catch_all(channel)
    api.set_policy("ae", "^(amq\\.direct|)$", {"alternate-exchange": "ae"}, apply_to="exchanges")

    publish(channel, "no-binding", "via-amq-direct", exchange="amq.direct")
    publish(channel, "no-queue", "via-default", exchange="")

    assert _bodies(channel, "unrouted") == [b"via-amq-direct"]


def test_ae_1_alternate_exchange_must_be_a_string(connection, vhost):
    closed = closed_by_broker(
        lambda: connection.channel().exchange_declare(
            "x", "direct", arguments={"alternate-exchange": 5}
        )
    )

    assert closed == (
        406,
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in "
        f"exchange 'x' in vhost '{vhost}'",
    )


def test_cn_6_declaring_an_exchange_with_an_ae_needs_write_on_the_ae(
    hutch_broker, api, vhost, vhost_user
):
    assert api.put(f"/users/{quote(vhost_user)}", {"password": "pw", "tags": ""}).status == 201
    permissions = {"configure": "^x", "write": "^x", "read": "^x"}
    assert api.put(f"/permissions/{quote(vhost)}/{quote(vhost_user)}", permissions).status == 201
    user = connect(hutch_broker, user=vhost_user, password="pw", vhost=vhost)

    refused = closed_by_broker(
        lambda: user.channel().exchange_declare(
            "x1", "direct", arguments={"alternate-exchange": "ae"}
        )
    )
    user.channel().exchange_declare("x2", "direct", arguments={"alternate-exchange": "x-ae"})

    assert refused == (
        403,
        f"ACCESS_REFUSED - access to exchange 'ae' in vhost '{vhost}' refused for user '{vhost_user}'",
    )


# -- AE-2 --------------------------------------------------------------------------------------


def test_ae_2_used_only_when_the_exchange_routes_nowhere(channel):
    _catch_all(channel)
    channel.exchange_declare("x", "direct", arguments={"alternate-exchange": "ae"})
    channel.queue_declare("bound")
    channel.queue_bind("bound", "x", "hit")

    publish(channel, "hit", "routed", exchange="x")
    publish(channel, "miss", "unrouted", exchange="x")

    assert _bodies(channel, "bound") == [b"routed"]
    assert _bodies(channel, "unrouted") == [b"unrouted"]


def test_ae_2_a_cc_key_that_routes_counts_as_routed(channel):
    _catch_all(channel)
    channel.exchange_declare("x", "direct", arguments={"alternate-exchange": "ae"})
    channel.queue_declare("by-cc")
    channel.queue_bind("by-cc", "x", "cc-key")

    publish(channel, "miss", "m", exchange="x", headers={"CC": ["cc-key"]})

    assert _bodies(channel, "by-cc") == [b"m"]
    assert _bodies(channel, "unrouted") == []


def test_ex_5_every_exchange_on_the_way_matches_all_routing_keys(channel):
    channel.exchange_declare("x", "direct")
    channel.exchange_declare("y", "direct")
    channel.exchange_bind("y", "x", "first")  # destination y, source x
    channel.queue_declare("q")
    channel.queue_bind("q", "y", "second")

    publish(channel, "first", "m", exchange="x", headers={"CC": ["second"]})

    assert _bodies(channel, "q") == [b"m"]


def test_ae_2_chains_are_followed(channel):
    _catch_all(channel, "last", "end")
    channel.exchange_declare("middle", "direct", arguments={"alternate-exchange": "last"})
    channel.exchange_declare("x", "direct", arguments={"alternate-exchange": "middle"})

    publish(channel, "k", "m", exchange="x")

    assert _bodies(channel, "end") == [b"m"]


def test_ae_2_a_cycle_terminates_and_each_exchange_is_visited_once(channel, confirms):
    channel.exchange_declare("x", "direct", arguments={"alternate-exchange": "u"})
    channel.exchange_declare("u", "direct", arguments={"alternate-exchange": "v"})
    channel.exchange_declare("v", "topic", arguments={"alternate-exchange": "x"})
    channel.queue_declare("on-v")
    channel.queue_bind("on-v", "v", "only.#")

    assert publish(confirms, "k", "lost", exchange="x", mandatory=True) == RETURNED
    assert publish(confirms, "only.me", "found", exchange="x", mandatory=True) == ACK

    assert _bodies(channel, "on-v") == [b"found"]


def test_ae_2_a_missing_alternate_exchange_is_skipped(channel, confirms):
    channel.exchange_declare("x", "direct", arguments={"alternate-exchange": "missing"})

    assert publish(confirms, "k", "m", exchange="x", mandatory=True) == RETURNED
    assert confirms.is_open


def test_ae_2_properties_and_persistence_are_carried(channel):
    _catch_all(channel)
    channel.exchange_declare("x", "direct", arguments={"alternate-exchange": "ae"})

    publish(
        channel,
        "the-key",
        "m",
        exchange="x",
        delivery_mode=2,
        headers={"h": "v"},
        message_id="id-1",
        expiration="60000",
    )

    method, props, body = get(channel, "unrouted")
    assert body == b"m"
    assert (method.exchange, method.routing_key) == ("x", "the-key")
    assert (props.delivery_mode, props.headers, props.message_id, props.expiration) == (
        2,
        {"h": "v"},
        "id-1",
        "60000",
    )


def test_ae_2_inside_a_transaction_ae_routed_copies_appear_only_on_commit(connection, channel):
    _catch_all(channel)
    channel.exchange_declare("x", "direct", arguments={"alternate-exchange": "ae"})
    tx = connection.channel()
    tx.tx_select()

    publish(tx, "k", "first", exchange="x")
    assert _bodies(channel, "unrouted") == []
    tx.tx_rollback()
    publish(tx, "k", "second", exchange="x")
    tx.tx_commit()

    assert _bodies(channel, "unrouted") == [b"second"]


# -- AE-3 --------------------------------------------------------------------------------------


def test_ae_3_mandatory_publish_routed_via_an_ae_is_not_returned(connection, channel, confirms):
    _catch_all(channel)
    channel.exchange_declare("x", "direct", arguments={"alternate-exchange": "ae"})

    with FrameRecorder() as recorder:
        outcome = publish(confirms, "k", "m", exchange="x", mandatory=True)

    assert outcome == ACK
    assert "Basic.Return" not in recorder.names()
    assert _bodies(channel, "unrouted") == [b"m"]


def test_ae_3_when_the_whole_chain_fails_the_return_names_the_original_exchange(
    connection, channel, confirms
):
    channel.exchange_declare("empty-ae", "direct")
    channel.exchange_declare("x", "direct", arguments={"alternate-exchange": "empty-ae"})

    with FrameRecorder() as recorder:
        outcome = publish(confirms, "k", "m", exchange="x", mandatory=True)

    assert outcome == RETURNED
    (returned,) = [frame.method for frame in recorder.frames if frame.name == "Basic.Return"]
    assert (returned.reply_code, returned.reply_text) == (312, "NO_ROUTE")
    assert (returned.exchange, returned.routing_key) == ("x", "k")


# -- AE-4 --------------------------------------------------------------------------------------


def test_ae_4_redeclare_with_another_alternate_exchange_is_406(connection, vhost):
    connection.channel().exchange_declare("x", "direct", arguments={"alternate-exchange": "u"})

    code, text = closed_by_broker(
        lambda: connection.channel().exchange_declare(
            "x", "direct", arguments={"alternate-exchange": "other"}
        )
    )

    assert (code, text) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'x' in "
        f"vhost '{vhost}': received 'other' but current is 'u'",
    )
