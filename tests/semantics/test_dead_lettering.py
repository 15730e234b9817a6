"""Dead-lettering (DLX-1..DLX-5): triggers, routing, x-death headers, cycles, precedence."""

import datetime

import pytest
from hutch_demo.management import quote
from hutch_demo.waiting import wait_for
from hutch_testing.clients import connect
from hutch_testing.steps import closed_by_broker, get, publish, publish_all, ready
from hutch_testing.wire import FrameRecorder, plain

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test

TO_DLQ = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}


def _drain(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got)
    return found


def _bodies(channel, queue):
    return [body for _method, _props, body in _drain(channel, queue)]


# -- DLX-1 -------------------------------------------------------------------------------------


def test_dlx_1_reject_and_nack_without_requeue_dead_letter_in_tag_order(channel):
    channel.queue_declare("dlq")
    channel.queue_declare("q", arguments=TO_DLQ)
    publish_all(channel, "q", ["a", "b", "c", "d", "e"])
    tags = [get(channel, "q", auto_ack=False)[0].delivery_tag for _ in range(5)]

    channel.basic_reject(tags[0], requeue=False)
    channel.basic_nack(tags[3], multiple=True, requeue=False)
    channel.basic_nack(tags[4], requeue=False)

    dead = _drain(channel, "dlq")
    assert [body for _m, _p, body in dead] == [b"a", b"b", b"c", b"d", b"e"]
    assert {props.headers["x-death"][0]["reason"] for _m, props, _b in dead} == {"rejected"}


def test_dlx_1_requeue_purge_delete_and_queue_expiry_never_dead_letter(channel, api):
    channel.queue_declare("dlq")
    channel.queue_declare("requeued", arguments=TO_DLQ)
    channel.queue_declare("purged", arguments=TO_DLQ)
    channel.queue_declare("deleted", arguments=TO_DLQ)
    channel.queue_declare("expired", arguments={"x-expires": 200, **TO_DLQ})
    for queue in ("requeued", "purged", "deleted", "expired"):
        publish(channel, queue, queue)

    method, _props, _body = get(channel, "requeued", auto_ack=False)
    channel.basic_nack(method.delivery_tag, requeue=True)
    channel.queue_purge("purged")
    channel.queue_delete("deleted")
    wait_for(lambda: not api.queue_exists("expired"), what="queue expiry")

    expired = closed_by_broker(
        lambda: channel.connection.channel().queue_declare("expired", passive=True)
    )
    assert expired[0] == 404  # it did expire, rather than being missing from the API's view
    assert ready(channel, "requeued") == 1
    assert _bodies(channel, "dlq") == []


# -- DLX-2 -------------------------------------------------------------------------------------


def test_dlx_2_without_dlrk_the_original_key_and_cc_route_never_bcc(channel):
    channel.exchange_declare("dlx", "direct")
    for queue, key in (("by-key", "orig"), ("by-cc", "cc-key"), ("by-bcc", "bcc-key")):
        channel.queue_declare(queue)
        channel.queue_bind(queue, "dlx", key)
    channel.exchange_declare("in", "direct")
    channel.queue_declare("q", arguments={"x-dead-letter-exchange": "dlx"})
    for key in ("orig", "cc-key", "bcc-key"):
        channel.queue_bind("q", "in", key)
    publish(channel, "orig", "m", exchange="in", headers={"CC": ["cc-key"], "BCC": ["bcc-key"]})
    method, _props, _body = get(channel, "q", auto_ack=False)

    channel.basic_reject(method.delivery_tag, requeue=False)

    by_key, by_cc = get(channel, "by-key"), get(channel, "by-cc")
    assert by_key[2] == by_cc[2] == b"m"
    assert (by_key[0].exchange, by_key[0].routing_key) == ("dlx", "orig")
    assert get(channel, "by-bcc") is None
    death = by_key[1].headers["x-death"][0]
    assert death["routing-keys"] == ["orig", "cc-key"]
    assert "BCC" not in by_key[1].headers


def test_dlx_2_the_dlrk_replaces_the_keys_and_shows_in_the_delivery(channel):
    channel.exchange_declare("dlx", "direct")
    channel.queue_declare("dlq")
    channel.queue_declare("orig-key-queue")
    channel.queue_bind("dlq", "dlx", "dead")
    channel.queue_bind("orig-key-queue", "dlx", "q")
    channel.queue_declare(
        "q", arguments={"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead"}
    )
    publish(channel, "q", "m")

    method, _props, _body = get(channel, "q", auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)

    delivered, _props, body = get(channel, "dlq")
    assert body == b"m"
    assert (delivered.exchange, delivered.routing_key) == ("dlx", "dead")
    assert get(channel, "orig-key-queue") is None


def test_dlx_2_with_a_dlrk_cc_is_kept_but_not_used_for_routing(channel):
    channel.exchange_declare("dlx", "direct")
    for queue, key in (("dlq", "dead"), ("by-cc", "cc-key")):
        channel.queue_declare(queue)
        channel.queue_bind(queue, "dlx", key)
    channel.queue_declare(
        "q", arguments={"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead"}
    )
    publish(channel, "q", "m", headers={"CC": ["cc-key"]})
    method, _props, _body = get(channel, "q", auto_ack=False)

    channel.basic_reject(method.delivery_tag, requeue=False)

    _method, props, body = get(channel, "dlq")
    assert body == b"m"
    assert props.headers["CC"] == ["cc-key"]
    assert props.headers["x-death"][0]["routing-keys"] == ["q", "cc-key"]
    assert get(channel, "by-cc") is None


def _limited_user(api, vhost, user, write):
    permissions = {"configure": "^q$", "write": write, "read": "^q$"}
    assert api.put(f"/permissions/{quote(vhost)}/{quote(user)}", permissions).status in (201, 204)


def test_cn_6_declaring_a_queue_with_a_dlx_needs_read_on_it_and_write_on_the_dlx(
    hutch_broker, api, vhost, vhost_user
):
    assert api.put(f"/users/{quote(vhost_user)}", {"password": "pw", "tags": ""}).status == 201
    _limited_user(api, vhost, vhost_user, write="^q$")
    user = connect(hutch_broker, user=vhost_user, password="pw", vhost=vhost)

    refused = closed_by_broker(
        lambda: user.channel().queue_declare("q", arguments={"x-dead-letter-exchange": "dlx"})
    )
    bad_type = closed_by_broker(
        lambda: user.channel().queue_declare("q", arguments={"x-dead-letter-exchange": 5})
    )
    declared = user.channel().queue_declare("q")  # no DLX: configure is enough

    assert refused == (
        403,
        f"ACCESS_REFUSED - access to exchange 'dlx' in vhost '{vhost}' refused for user "
        f"'{vhost_user}'",
    )
    assert bad_type == (
        406,
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' "
        f"in queue 'q' in vhost '{vhost}'",
    )
    assert declared.method.queue == "q"


def test_dlx_2_permissions_are_not_checked_when_dead_lettering(
    hutch_broker, api, vhost, vhost_user
):
    assert api.put(f"/users/{quote(vhost_user)}", {"password": "pw", "tags": ""}).status == 201
    _limited_user(api, vhost, vhost_user, write="^(q|dlx|amq\\.default)$")
    admin = connect(hutch_broker, vhost=vhost).channel()
    admin.exchange_declare("dlx", "fanout")
    admin.queue_declare("dlq")
    admin.queue_bind("dlq", "dlx")
    user = connect(hutch_broker, user=vhost_user, password="pw", vhost=vhost).channel()
    user.queue_declare("q", arguments={"x-dead-letter-exchange": "dlx"})
    publish(user, "q", "m")
    _limited_user(
        api, vhost, vhost_user, write="^(q|amq\\.default)$"
    )  # no write on the DLX any more

    method, _props, _body = get(user, "q", auto_ack=False)
    user.basic_reject(method.delivery_tag, requeue=False)

    assert user.queue_declare("q", passive=True).method.message_count == 0
    assert get(admin, "dlq")[2] == b"m"


def test_dlx_2_a_missing_dlx_drops_silently_and_need_not_exist_at_declare(channel):
    channel.queue_declare("q", arguments={"x-dead-letter-exchange": "not-yet"})
    publish_all(channel, "q", ["lost", "kept"])

    method, _props, _body = get(channel, "q", auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)
    channel.exchange_declare("not-yet", "fanout")
    channel.queue_declare("dlq")
    channel.queue_bind("dlq", "not-yet")
    method, _props, _body = get(channel, "q", auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)

    assert channel.is_open
    assert _bodies(channel, "dlq") == [b"kept"]


# -- DLX-3 -------------------------------------------------------------------------------------


def test_dlx_3_x_death_wire_types(connection, channel):
    channel.queue_declare("dlq")
    channel.queue_declare("q", arguments=TO_DLQ)
    publish(channel, "q", "m", expiration="60000")
    method, _props, _body = get(channel, "q", auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)

    with FrameRecorder() as recorder:
        assert get(channel, "dlq")[2] == b"m"

    (headers,) = recorder.headers()
    tag, deaths = headers["x-death"]
    assert tag == "A"
    (death_tag, death), *_ = deaths
    assert death_tag == "F"
    types = {key: value[0] for key, value in death.items()}
    assert types == {
        "count": "l",
        "reason": "S",
        "queue": "S",
        "time": "T",
        "exchange": "S",
        "routing-keys": "A",
        "original-expiration": "S",
    }
    assert [item[0] for item in death["routing-keys"][1]] == ["S"]
    assert plain(death["count"]) == 1
    now = datetime.datetime.now(tz=datetime.UTC).timestamp()
    assert abs(plain(death["time"]) - now) < 60


def test_dlx_3_repeat_deaths_increment_count_in_a_single_entry(channel):
    # q dead-letters to itself: a cycle, but one made of rejects, so it continues (DLX-4).
    channel.queue_declare(
        "q", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"}
    )
    publish(channel, "q", "m")

    counts = []
    for _ in range(3):
        method, _props, _body = get(channel, "q", auto_ack=False)
        channel.basic_reject(method.delivery_tag, requeue=False)
        _method, props, _body = get(channel, "q", auto_ack=False)
        counts.append([death["count"] for death in props.headers["x-death"]])
        channel.basic_nack(_method.delivery_tag, requeue=True)

    assert counts == [[1], [2], [3]]


def test_dlx_3_deaths_are_newest_first_with_first_and_last_death_headers(channel):
    channel.queue_declare("final")
    channel.queue_declare(
        "second", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "final"}
    )
    channel.queue_declare(
        "first",
        arguments={
            "x-message-ttl": 50,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "second",
        },
    )
    publish(
        channel,
        "first",
        "m",
        headers={"CC": ["nowhere"], "app": "kept"},
        delivery_mode=2,
        content_type="text/plain",
    )
    method, _props, _body = wait_for(lambda: get(channel, "second", auto_ack=False))

    channel.basic_reject(method.delivery_tag, requeue=False)

    _method, props, body = get(channel, "final")
    headers = props.headers
    assert body == b"m"
    assert [(d["queue"], d["reason"]) for d in headers["x-death"]] == [
        ("second", "rejected"),
        ("first", "expired"),
    ]
    assert [d["count"] for d in headers["x-death"]] == [1, 1]
    assert (
        headers["x-first-death-reason"],
        headers["x-first-death-queue"],
        headers["x-first-death-exchange"],
    ) == ("expired", "first", "")
    assert (
        headers["x-last-death-reason"],
        headers["x-last-death-queue"],
        headers["x-last-death-exchange"],
    ) == ("rejected", "second", "")
    assert headers["CC"] == ["nowhere"]
    assert headers["app"] == "kept"
    assert (props.delivery_mode, props.content_type) == (2, "text/plain")


def test_dlx_3_a_publisher_set_x_death_is_replaced_at_the_first_death(channel):
    channel.queue_declare("dlq")
    channel.queue_declare("q", arguments=TO_DLQ)
    forged = [{"count": 7, "reason": "expired", "queue": "elsewhere", "exchange": ""}]
    publish(channel, "q", "m", headers={"x-death": forged, "app": "kept"})
    method, _props, _body = get(channel, "q", auto_ack=False)

    channel.basic_reject(method.delivery_tag, requeue=False)

    _method, props, _body = get(channel, "dlq")
    deaths = props.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [("q", "rejected", 1)]
    assert props.headers["x-first-death-queue"] == "q"
    assert props.headers["app"] == "kept"


# -- DLX-4 -------------------------------------------------------------------------------------


def test_dlx_4_an_expiry_cycle_is_dropped_for_the_cycling_queue_only(channel):
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("log")
    channel.queue_declare("q", arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "dlx"})
    channel.queue_bind("q", "dlx")
    channel.queue_bind("log", "dlx")
    publish(channel, "q", "m")

    _method, props, body = wait_for(lambda: get(channel, "log"))

    assert body == b"m"
    assert props.headers["x-death"][0]["reason"] == "expired"
    wait_for(lambda: ready(channel, "q"), lambda count: count == 0, what="q to empty")
    assert get(channel, "log") is None  # it went round exactly once


def test_dlx_4_a_cycle_that_includes_a_reject_continues(channel):
    channel.queue_declare(
        "q",
        arguments={
            "x-message-ttl": 50,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "bounce",
        },
    )
    channel.queue_declare(
        "bounce", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"}
    )
    publish(channel, "q", "m")
    method, _props, _body = wait_for(lambda: get(channel, "bounce", auto_ack=False))

    channel.basic_reject(method.delivery_tag, requeue=False)  # back to q, a cycle with a reject

    _method, props, _body = wait_for(lambda: get(channel, "bounce", auto_ack=False))
    assert [(d["queue"], d["reason"], d["count"]) for d in props.headers["x-death"]] == [
        ("q", "expired", 2),
        ("bounce", "rejected", 1),
    ]


# -- DLX-5 -------------------------------------------------------------------------------------


def test_dlx_5_arguments_beat_the_user_policy_even_one_set_later(channel, api):
    for queue in ("by-argument", "by-policy"):
        channel.queue_declare(queue)
    channel.queue_declare(
        "q", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "by-argument"}
    )
    channel.queue_declare("p")
    api.set_policy(
        "dl", "^(q|p)$", {"dead-letter-exchange": "", "dead-letter-routing-key": "by-policy"}
    )
    publish(channel, "q", "from-q")
    publish(channel, "p", "from-p")

    for queue in ("q", "p"):
        method, _props, _body = get(channel, queue, auto_ack=False)
        channel.basic_reject(method.delivery_tag, requeue=False)

    assert _bodies(channel, "by-argument") == [b"from-q"]
    assert _bodies(channel, "by-policy") == [b"from-p"]


def test_dlx_5_operator_policies_cannot_set_dead_letter_keys(api):
    response = api.put_policy("ops", ".*", {"dead-letter-exchange": "x"}, operator=True)

    assert response.status == 400
    assert response.body["reason"] == (
        "Validation failed\n\n"
        '[{<<"dead-letter-exchange">>,<<"x">>}] are not recognised policy settings\n'
    )
