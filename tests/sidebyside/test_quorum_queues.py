"""Quorum-type queues on one replica, side by side with RabbitMQ 3.10.8 (issue 14).

3.10.8 runs quorum queues on a single node, so everything that needs no replication is compared
directly: the declare rules and their texts, the arguments refused, the delivery count and its
limit with dead-lettering, where a returned message goes, and what the management API shows.
Restarts are tested on hutch-broker alone (tests/broker/test_quorum_durable.py): the reference
node is shared by the whole session.
"""

import pika
import pytest
from hutch_demo.waiting import wait_for
from hutch_testing.steps import ACK, NACK, closed_by_broker, get, publish, ready

pytestmark = pytest.mark.rabbitmq

QUORUM = {"x-queue-type": "quorum"}
ERLANG_INTERNALS = {"garbage_collection", "reductions", "reductions_details"}
# GET /api/queues/%2F/{name} of an idle quorum queue on 3.10.8 (observed, no message_stats yet)
QUORUM_ITEM_KEYS = {
    "arguments", "auto_delete", "consumer_capacity", "consumer_details", "consumer_utilisation",
    "consumers", "deliveries", "durable", "effective_policy_definition", "exclusive",
    "garbage_collection", "incoming", "leader", "members", "memory", "message_bytes",
    "message_bytes_dlx", "message_bytes_persistent", "message_bytes_ram", "message_bytes_ready",
    "message_bytes_unacknowledged", "messages", "messages_details", "messages_dlx",
    "messages_persistent", "messages_ram", "messages_ready", "messages_ready_details",
    "messages_unacknowledged", "messages_unacknowledged_details", "name", "node", "online",
    "open_files", "operator_policy", "policy", "reductions", "reductions_details",
    "single_active_consumer_ctag", "state", "type", "vhost",
}  # fmt: skip


def _declare(target, name, **kwargs):
    """queue.declare on a fresh channel: "ok", or the broker's (code, text)."""
    channel = target.connection.channel()
    try:
        channel.queue_declare(name, **kwargs)
    except pika.exceptions.ChannelClosedByBroker as closed:
        return closed.reply_code, closed.reply_text
    return "ok"


def _refusal(target, name, detail):
    return 406, f"PRECONDITION_FAILED - {detail}".replace("{q}", target.name(name))


def test_quorum_queues_are_durable_shared_and_client_named(target):
    qq = target.name("qq")
    assert _declare(target, qq, durable=True, arguments=QUORUM) == "ok"
    assert _declare(target, qq, durable=True, arguments=QUORUM, passive=True) == "ok"

    refused = {
        "ad": _declare(target, target.name("ad"), durable=True, auto_delete=True, arguments=QUORUM),
        "ex": _declare(target, target.name("ex"), durable=True, exclusive=True, arguments=QUORUM),
        "nd": _declare(target, target.name("nd"), durable=False, arguments=QUORUM),
        "all": _declare(
            target, target.name("all"), durable=False, exclusive=True, auto_delete=True,
            arguments=QUORUM,
        ),
        "nd-ex": _declare(
            target, target.name("nd-ex"), durable=False, exclusive=True, arguments=QUORUM
        ),
        "server-named": _declare(target, "", durable=True, arguments=QUORUM),
    }  # fmt: skip
    http = target.api.put(
        f"/queues/%2F/{target.name('http')}", {"durable": False, "arguments": QUORUM}
    )

    def prop(suffix, name):
        return 406, (
            f"PRECONDITION_FAILED - invalid property '{name}' for queue "
            f"'{target.name(suffix)}' in vhost '/'"
        )

    assert refused == {
        "ad": prop("ad", "auto-delete"),
        "ex": prop("ex", "exclusive-owner"),
        "nd": prop("nd", "non-durable"),
        "all": prop("all", "auto-delete"),
        "nd-ex": prop("nd-ex", "exclusive-owner"),
        "server-named": (
            406,
            "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue",
        ),
    }
    assert (http.status, http.body) == (
        400,
        {
            "error": "bad_request",
            "reason": f"invalid property 'non-durable' for queue '{target.name('http')}' in "
            "vhost '/'",
        },
    )


def test_redeclaring_with_another_queue_type_is_inequivalent(target):
    qq, cq = target.name("qq"), target.name("cq")
    _declare(target, qq, durable=True, arguments=QUORUM)
    _declare(target, cq, durable=True)
    prefix = "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue"
    assert _declare(target, qq, durable=True) == (
        406,
        f"{prefix} '{qq}' in vhost '/': received none but current is the value 'quorum' of "
        "type 'longstr'",
    )
    assert _declare(target, qq, durable=True, arguments={"x-queue-type": "classic"}) == (
        406,
        f"{prefix} '{qq}' in vhost '/': received 'classic' but current is 'quorum'",
    )
    assert _declare(target, cq, durable=True, arguments=QUORUM) == (
        406,
        f"{prefix} '{cq}' in vhost '/': received the value 'quorum' of type 'longstr' but "
        "current is none",
    )
    assert _declare(target, cq, durable=True, arguments={"x-queue-type": "classic"}) == "ok"


REFUSED = [
    ("x-max-priority", 5),
    ("x-queue-mode", "lazy"),
    ("x-queue-version", 2),
    ("x-queue-master-locator", "min-masters"),
    ("x-max-age", "1D"),
    ("x-stream-max-segment-size-bytes", 10),
    ("x-initial-cluster-size", 1),
]
INVALID = [
    ("x-dead-letter-strategy", "bogus", "invalid_dlx_strategy"),
    ("x-quorum-initial-group-size", 0, "{value_zero,0}"),
    ("x-max-in-memory-bytes", -1, "{value_negative,-1}"),
    ("x-max-in-memory-length", -1, "{value_negative,-1}"),
    ("x-message-ttl", -1, "{value_negative,-1}"),
]
ACCEPTED = [
    ("x-delivery-limit", 3),
    ("x-dead-letter-strategy", "at-least-once"),
    ("x-quorum-initial-group-size", 1),
    ("x-queue-leader-locator", "balanced"),
    ("x-single-active-consumer", True),
    ("x-max-length", 3),
    ("x-overflow", "reject-publish"),
    ("x-expires", 60_000),
]


def test_arguments_quorum_queues_refuse_accept_and_check(target):
    outcomes = {}
    for index, (arg, value) in enumerate(REFUSED + [(a, v) for a, v, _ in INVALID] + ACCEPTED):
        name = target.name(f"a{index}")
        outcomes[name] = _declare(target, name, durable=True, arguments={**QUORUM, arg: value})
    bad_type = _declare(target, target.name("t"), durable=True, arguments={"x-queue-type": "s2"})

    expected = {}
    for index, (arg, _) in enumerate(REFUSED):
        name = target.name(f"a{index}")
        expected[name] = (
            406,
            f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{name}' in vhost '/' of queue "
            "type rabbit_quorum_queue",
        )
    for index, (arg, _, detail) in enumerate(INVALID, start=len(REFUSED)):
        name = target.name(f"a{index}")
        expected[name] = (
            406,
            f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{name}' in vhost '/': {detail}",
        )
    for index in range(len(ACCEPTED)):
        expected[target.name(f"a{index + len(REFUSED) + len(INVALID)}")] = "ok"
    assert outcomes == expected
    assert bad_type == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue '{target.name('t')}' in "
        "vhost '/': \"unsupported queue type 's2'\"",
    )


def _nack_until_gone(channel, queue, *, limit=6):
    """basic.get then nack with requeue until the queue is empty; the headers of each delivery."""
    seen = []
    for _ in range(limit):
        got = _get_soon(channel, queue)
        if got is None:
            break
        method, properties, _ = got
        seen.append((method.redelivered, dict(properties.headers or {})))
        channel.basic_nack(method.delivery_tag, requeue=True)
    return seen


def _get_soon(channel, queue):
    """basic.get (no auto-ack), allowing a moment for a return to land; None if none does."""
    try:
        return wait_for(lambda: get(channel, queue, auto_ack=False), timeout=1.0)
    except AssertionError:
        return None


def test_delivery_limit_counts_returns_and_dead_letters_past_it(target):
    channel = target.channel()
    q, dlq = target.name("q"), target.name("dlq")
    channel.queue_declare(dlq)
    arguments = {
        **QUORUM,
        "x-delivery-limit": 2,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": dlq,
    }
    channel.queue_declare(q, durable=True, arguments=arguments)
    publish(channel, q, "poison", headers={"h": 1})

    seen = _nack_until_gone(channel, q)
    dead = wait_for(lambda: get(channel, dlq), what="the dead-lettered message")

    assert seen == [
        (False, {"h": 1, "x-delivery-count": 0}),
        (True, {"h": 1, "x-delivery-count": 1}),
        (True, {"h": 1, "x-delivery-count": 2}),
    ]
    headers = dead[1].headers
    assert dead[2] == b"poison"
    assert "x-delivery-count" not in headers
    assert headers["h"] == 1
    assert headers["x-first-death-reason"] == "delivery_limit"
    assert headers["x-first-death-queue"] == q
    [death] = headers["x-death"]
    assert (death["reason"], death["queue"], death["count"], death["routing-keys"]) == (
        "delivery_limit",
        q,
        1,
        [q],
    )


def test_delivery_limit_zero_and_the_delivery_limit_policy(target):
    channel = target.channel()
    zero, by_policy, unlimited = target.name("zero"), target.name("pol"), target.name("none")
    target.api.set_policy(target.name("p"), target.anchored("pol"), {"delivery-limit": 1})
    channel.queue_declare(zero, durable=True, arguments={**QUORUM, "x-delivery-limit": 0})
    channel.queue_declare(by_policy, durable=True, arguments=QUORUM)
    channel.queue_declare(unlimited, durable=True, arguments=QUORUM)
    for queue in (zero, by_policy, unlimited):
        publish(channel, queue, "m")

    deliveries = {
        queue: len(_nack_until_gone(channel, queue, limit=4))
        for queue in (zero, by_policy, unlimited)
    }

    assert deliveries == {zero: 1, by_policy: 2, unlimited: 4}
    wait_for(lambda: ready(channel, unlimited), lambda count: count == 1, what="no limit")


def test_a_returned_message_goes_to_the_back_and_a_closed_channel_counts(target):
    channel = target.channel()
    q = target.name("q")
    channel.queue_declare(q, durable=True, arguments=QUORUM)
    for body in ("1", "2", "3"):
        publish(channel, q, body)
    first = get(channel, q, auto_ack=False)
    second = get(channel, q, auto_ack=False)  # "2" stays unacked for now
    channel.basic_nack(first[0].delivery_tag, requeue=True)
    wait_for(lambda: ready(channel, q), lambda count: count == 2, what="the return")
    order = [get(channel, q)[2].decode() for _ in range(2)]

    other = target.connect().channel()
    publish(channel, q, "4")
    held = get(other, q, auto_ack=False)
    other.connection.close()  # the unacked "4" returns, counting one attempt
    wait_for(lambda: ready(channel, q), lambda count: count == 1, what="the return of 4")
    channel.basic_nack(second[0].delivery_tag, requeue=True)
    wait_for(lambda: ready(channel, q), lambda count: count == 2, what="the return of 2")
    after_close = []
    while (got := get(channel, q)) is not None:
        after_close.append((got[2].decode(), got[0].redelivered, got[1].headers))

    assert order == ["3", "1"]
    assert held[1].headers == {"x-delivery-count": 0}
    assert after_close == [
        ("4", True, {"x-delivery-count": 1}),
        ("2", True, {"x-delivery-count": 1}),
    ]


def test_global_qos_is_refused_on_consume(target):
    q = target.name("q")
    target.channel().queue_declare(q, durable=True, arguments=QUORUM)
    channel = target.connect().channel()
    channel.basic_qos(prefetch_count=5, global_qos=True)

    refused = closed_by_broker(lambda: channel.basic_consume(q, lambda *_: None))

    assert refused == (
        540,
        f"NOT_IMPLEMENTED - queue '{q}' in vhost '/' does not support global qos",
    )


def test_management_shows_type_quorum_with_this_node_as_leader(target):
    q = target.name("q")
    target.channel().queue_declare(q, durable=True, arguments={**QUORUM, "x-delivery-limit": 3})

    item = wait_for(  # 3.10.8 reports a quorum queue's counters some 10 s after its creation,
        # and not all in the same stats emission (open_files came later in one CI run)
        lambda: target.api.queue(q),
        lambda body: "messages" in body and "open_files" in body,
        timeout=30,
    )
    listed = [entry for entry in target.api.get("/queues/%2F").body if entry["name"] == q]
    exported = target.api.get("/definitions").body["queues"]

    assert (item["type"], item["durable"], item["auto_delete"], item["exclusive"]) == (
        "quorum",
        True,
        False,
        False,
    )
    assert item["members"] == item["online"] == [item["leader"]]
    assert item["open_files"] == {item["leader"]: 0}
    assert (item["messages"], item["messages_dlx"], item["single_active_consumer_ctag"]) == (
        0,
        0,
        None,
    )
    internals = target.expect("erlang-internals", hutch=ERLANG_INTERNALS, rabbitmq=set())
    assert set(item) == QUORUM_ITEM_KEYS - internals
    assert item["arguments"] == {"x-delivery-limit": 3, "x-queue-type": "quorum"}
    assert [entry["type"] for entry in listed] == ["quorum"]
    assert [entry["arguments"] for entry in exported if entry["name"] == q] == [
        {"x-delivery-limit": 3, "x-queue-type": "quorum"}
    ]


def test_consumers_see_the_delivery_count_too(target):
    channel = target.channel()
    q = target.name("q")
    channel.queue_declare(q, durable=True, arguments={**QUORUM, "x-delivery-limit": 1})
    publish(channel, q, "m")
    seen = []

    def on_message(ch, method, properties, body):
        seen.append((body, method.redelivered, properties.headers))
        ch.basic_nack(method.delivery_tag, requeue=True)

    channel.basic_consume(q, on_message)
    wait_for(lambda: channel.connection.process_data_events(0.05) or len(seen), lambda n: n >= 2)
    channel.connection.process_data_events(0.3)  # a third delivery would show up here

    assert seen == [
        (b"m", False, None),  # basic.get shows 0 here; a consumer sees no header yet
        (b"m", True, {"x-delivery-count": 1}),
    ]


def _publish_outcomes(channel, queue, count):
    return [publish(channel, queue, f"m{index}") for index in range(count)]


def test_overflow_fills_one_past_the_limit_and_reject_publish_dlx_drops_the_head(target):
    channel = target.channel()
    one, three, by_bytes, dlx, dlq = (target.name(s) for s in ("one", "three", "b", "dlx", "dlq"))
    channel.queue_declare(dlq)
    reject = {**QUORUM, "x-overflow": "reject-publish"}
    channel.queue_declare(one, durable=True, arguments={**reject, "x-max-length": 1})
    channel.queue_declare(three, durable=True, arguments={**reject, "x-max-length": 3})
    channel.queue_declare(by_bytes, durable=True, arguments={**reject, "x-max-length-bytes": 3})
    channel.queue_declare(
        dlx,
        durable=True,
        arguments={**QUORUM, "x-max-length": 1, "x-overflow": "reject-publish-dlx",
                   "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq},
    )  # fmt: skip

    outcomes = {
        one: _publish_outcomes(channel, one, 4),
        three: _publish_outcomes(channel, three, 6),
        by_bytes: _publish_outcomes(channel, by_bytes, 4),  # 2-byte bodies
        dlx: _publish_outcomes(channel, dlx, 2),
    }
    kept = {queue: ready(channel, queue) for queue in outcomes}
    dead = wait_for(lambda: get(channel, dlq), what="the dropped head")

    assert outcomes == {
        one: [ACK, ACK, NACK, NACK],
        three: [ACK] * 4 + [NACK] * 2,
        by_bytes: [ACK, ACK, NACK, NACK],
        dlx: [ACK, ACK],
    }
    assert kept == {one: 2, three: 4, by_bytes: 2, dlx: 1}
    assert (dead[2], dead[1].headers["x-first-death-reason"]) == (b"m0", "maxlen")


def test_no_delivery_limit_and_a_negative_one(target):
    """4.x defaults to 20 and reads a negative limit as none; 3.10.8 has no default and
    dead-letters at the first return past a negative one."""
    channel = target.channel()
    default, negative = target.name("default"), target.name("negative")
    channel.queue_declare(default, durable=True, arguments=QUORUM)
    channel.queue_declare(negative, durable=True, arguments={**QUORUM, "x-delivery-limit": -1})
    for queue in (default, negative):
        publish(channel, queue, "m")

    deliveries = {
        queue: len(_nack_until_gone(channel, queue, limit=25)) for queue in (default, negative)
    }

    assert deliveries == target.expect(
        "quorum-delivery-limit",
        hutch={default: 21, negative: 25},
        rabbitmq={default: 25, negative: 1},
    )
