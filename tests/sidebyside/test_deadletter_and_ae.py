"""Dead-lettering and alternate exchanges side by side (DLX-*, AE-*)."""

import datetime

import pytest
from hutch_demo.waiting import wait_for
from hutch_testing.steps import ACK, RETURNED, closed_by_broker, get, publish, ready
from hutch_testing.wire import FrameRecorder

pytestmark = pytest.mark.rabbitmq

FIRST_DEATH = ("x-first-death-exchange", "x-first-death-queue", "x-first-death-reason")
LAST_DEATH = ("x-last-death-exchange", "x-last-death-queue", "x-last-death-reason")


def _bodies(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2].decode())
    return found


def _arrived(channel, queue, count=1):
    """Wait for ``count`` ready messages: RabbitMQ dead-letters asynchronously."""
    wait_for(lambda: ready(channel, queue), lambda n: n == count, what=f"{count} in {queue}")


def _reject_head(channel, queue):
    method = get(channel, queue, auto_ack=False)[0]
    channel.basic_reject(method.delivery_tag, requeue=False)


def _to(target, queue):
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": target.name(queue)}


# -- dead-lettering ----------------------------------------------------------------------------


def test_dlx_3_x_death_shape_and_wire_types(target):
    ch = target.channel()
    q, dlq = target.name("q"), target.name("dlq")
    ch.queue_declare(dlq)
    ch.queue_declare(q, arguments=_to(target, "dlq"))
    publish(ch, q, "m", expiration="60000", headers={"app": 1}, delivery_mode=2)
    _reject_head(ch, q)
    _arrived(ch, dlq)

    with FrameRecorder() as recorder:
        method, props, body = get(ch, dlq)

    headers = dict(props.headers)
    (death,) = headers.pop("x-death")
    stamp = death.pop("time")
    assert body == b"m"
    assert (method.exchange, method.routing_key) == ("", dlq)
    assert (props.expiration, props.delivery_mode) == (None, 2)
    assert death == {
        "count": 1,
        "reason": "rejected",
        "queue": q,
        "exchange": "",
        "routing-keys": [q],
        "original-expiration": "60000",
    }
    assert isinstance(stamp, datetime.datetime)
    death_headers = {"x-first-death-exchange": "", "x-first-death-queue": q}
    death_headers |= {"x-first-death-reason": "rejected"}
    last = {"x-last-death-exchange": "", "x-last-death-queue": q, "x-last-death-reason": "rejected"}
    death_headers |= target.expect("x-last-death-headers", hutch=last, rabbitmq={})
    assert headers == {"app": 1, **death_headers}
    (typed,) = recorder.headers()
    typed_death = typed["x-death"][1][0][1]
    assert {key: value[0] for key, value in typed_death.items()} == {
        "count": "l",
        "reason": "S",
        "queue": "S",
        "time": "T",
        "exchange": "S",
        "routing-keys": "A",
        "original-expiration": "S",
    }


def test_dlx_3_x_death_entries_for_expiry_and_maxlen(target):
    ch = target.channel()
    n = target.name
    ch.exchange_declare(n("in"), "topic")
    ch.queue_declare(n("dlq"))
    to_dlq = _to(target, "dlq")
    for queue, key, extra in (
        ("ttl", "t.#", {"x-message-ttl": 50}),
        ("len", "l.#", {"x-max-length": 1}),
        ("rpd", "r.#", {"x-max-length": 0, "x-overflow": "reject-publish-dlx"}),
    ):
        ch.queue_declare(n(queue), arguments={**extra, **to_dlq})
        ch.queue_bind(n(queue), n("in"), key)

    publish(ch, "t.queue", "expired-by-queue", exchange=n("in"))
    publish(ch, "t.message", "expired-by-message", exchange=n("in"), expiration="20")
    publish(ch, "l.x", "dropped", exchange=n("in"), headers={"CC": ["l.cc"]})
    publish(ch, "l.x", "kept", exchange=n("in"))
    publish(ch, "r.x", "refused", exchange=n("in"))
    _arrived(ch, n("dlq"), 4)

    deaths = {}
    while (got := get(ch, n("dlq"))) is not None:
        (death,) = got[1].headers["x-death"]
        death.pop("time")
        deaths[got[2].decode()] = death
    assert deaths == {
        "expired-by-queue": {
            "count": 1,
            "reason": "expired",
            "queue": n("ttl"),
            "exchange": n("in"),
            "routing-keys": ["t.queue"],
        },
        "expired-by-message": {
            "count": 1,
            "reason": "expired",
            "queue": n("ttl"),
            "exchange": n("in"),
            "routing-keys": ["t.message"],
            "original-expiration": "20",
        },
        "dropped": {
            "count": 1,
            "reason": "maxlen",
            "queue": n("len"),
            "exchange": n("in"),
            "routing-keys": ["l.x", "l.cc"],
        },
        "refused": {
            "count": 1,
            "reason": "maxlen",
            "queue": n("rpd"),
            "exchange": n("in"),
            "routing-keys": ["r.x"],
        },
    }


def test_dlx_3_repeat_deaths_count_up_in_one_entry(target):
    ch = target.channel()
    q = target.name("q")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q})
    publish(ch, q, "m")

    counts = []
    for _ in range(3):
        _reject_head(ch, q)
        _arrived(ch, q)
        method, props, _body = get(ch, q, auto_ack=False)
        counts.append([(d["queue"], d["reason"], d["count"]) for d in props.headers["x-death"]])
        ch.basic_nack(method.delivery_tag, requeue=True)

    assert counts == [[(q, "rejected", n)] for n in (1, 2, 3)]


def test_dlx_3_newest_death_first_across_queues(target):
    ch = target.channel()
    first, second, final = target.name("first"), target.name("second"), target.name("final")
    ch.queue_declare(final)
    ch.queue_declare(second, arguments=_to(target, "final"))
    ch.queue_declare(first, arguments={"x-message-ttl": 50, **_to(target, "second")})
    publish(ch, first, "m")
    wait_for(lambda: ready(ch, second), lambda count: count == 1, what="the expiry")

    _reject_head(ch, second)
    _arrived(ch, final)

    headers = get(ch, final)[1].headers
    assert [(d["queue"], d["reason"], d["count"]) for d in headers["x-death"]] == [
        (second, "rejected", 1),
        (first, "expired", 1),
    ]
    assert {key: headers[key] for key in FIRST_DEATH} == {
        "x-first-death-exchange": "",
        "x-first-death-queue": first,
        "x-first-death-reason": "expired",
    }


def test_dlx_2_keys_without_and_with_a_dlrk(target):
    ch = target.channel()
    n = target.name
    ch.exchange_declare(n("in"), "direct")
    ch.exchange_declare(n("dlx"), "direct")
    for queue, key in (("by-key", "orig"), ("by-cc", "cc"), ("by-bcc", "bcc"), ("by-dlrk", "dead")):
        ch.queue_declare(n(queue))
        ch.queue_bind(n(queue), n("dlx"), key)
    ch.queue_declare(n("plain"), arguments={"x-dead-letter-exchange": n("dlx")})
    ch.queue_declare(
        n("keyed"),
        arguments={"x-dead-letter-exchange": n("dlx"), "x-dead-letter-routing-key": "dead"},
    )
    for queue in ("plain", "keyed"):
        for key in ("orig", "cc", "bcc"):
            ch.queue_bind(n(queue), n("in"), key)
    publish(ch, "orig", "m", exchange=n("in"), headers={"CC": ["cc"], "BCC": ["bcc"]})

    bcc = target.expect("dead-letter-bcc", hutch=0, rabbitmq=1)
    _reject_head(ch, n("plain"))
    for queue, count in (("by-key", 1), ("by-cc", 1), ("by-bcc", bcc)):
        _arrived(ch, n(queue), count)
    plain = {queue: _bodies(ch, n(queue)) for queue in ("by-key", "by-cc", "by-bcc", "by-dlrk")}
    _reject_head(ch, n("keyed"))
    _arrived(ch, n("by-dlrk"))
    method, props, _body = get(ch, n("by-dlrk"))
    keyed = {queue: _bodies(ch, n(queue)) for queue in ("by-key", "by-cc", "by-bcc")}

    assert plain == {"by-key": ["m"], "by-cc": ["m"], "by-bcc": ["m"] * bcc, "by-dlrk": []}
    assert keyed == {"by-key": [], "by-cc": [], "by-bcc": []}
    assert (method.exchange, method.routing_key) == (n("dlx"), "dead")
    assert props.headers["x-death"][0]["routing-keys"] == ["orig", "cc"]
    cc = target.expect("cc-with-dead-letter-routing-key", hutch=["cc"], rabbitmq=None)
    assert props.headers.get("CC") == cc


def test_dlx_3_publisher_set_x_death(target):
    ch = target.channel()
    q, dlq = target.name("q"), target.name("dlq")
    ch.queue_declare(dlq)
    ch.queue_declare(q, arguments=_to(target, "dlq"))
    forged = [{"count": 7, "reason": "expired", "queue": "elsewhere", "exchange": ""}]
    publish(ch, q, "m", headers={"x-death": forged})
    _reject_head(ch, q)
    _arrived(ch, dlq)

    deaths = get(ch, dlq)[1].headers["x-death"]

    observed = [(d["queue"], d["reason"], d["count"]) for d in deaths]
    assert observed == target.expect(
        "publisher-x-death",
        hutch=[(q, "rejected", 1)],
        rabbitmq=[(q, "rejected", 1), ("elsewhere", "expired", 7)],
    )


def test_cn_6_declaring_with_a_dlx_needs_read_on_the_queue_and_write_on_the_dlx(target, request):
    api, n = target.api, target.name
    user = n("user")
    assert api.put(f"/users/{user}", {"password": "pw", "tags": ""}).status == 201
    request.addfinalizer(lambda: api.delete(f"/users/{user}"))
    permissions = {"configure": f"^{n('')}", "write": f"^{n('q')}$", "read": f"^{n('ok')}$"}
    assert api.put(f"/permissions/%2F/{user}", permissions).status == 201
    connection = target.connect(user=user, password="pw")

    def declare(queue, arguments):
        return closed_by_broker(
            lambda: connection.channel().queue_declare(n(queue), arguments=arguments)
        )

    no_read = declare("q", {"x-dead-letter-exchange": n("q")})
    no_write = declare("ok", {"x-dead-letter-exchange": n("dlx")})
    bad_type = declare("ok", {"x-dead-letter-exchange": 5})

    refused = f"ACCESS_REFUSED - access to %s in vhost '/' refused for user '{user}'"
    assert no_read == (403, refused % f"queue '{n('q')}'")
    assert no_write == (403, refused % f"exchange '{n('dlx')}'")
    assert bad_type == (
        406,
        f"PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in "
        f"queue '{n('ok')}' in vhost '/'",
    )


def test_dlx_4_expiry_cycle_is_dropped_and_missing_dlx_drops(target):
    ch = target.channel()
    n = target.name
    ch.exchange_declare(n("dlx"), "fanout")
    ch.queue_declare(n("log"))
    ch.queue_declare(n("q"), arguments={"x-message-ttl": 50, "x-dead-letter-exchange": n("dlx")})
    ch.queue_bind(n("q"), n("dlx"))
    ch.queue_bind(n("log"), n("dlx"))
    ch.queue_declare(n("orphan"), arguments={"x-dead-letter-exchange": n("missing")})
    publish(ch, n("q"), "m")
    publish(ch, n("orphan"), "o")

    wait_for(lambda: ready(ch, n("log")), lambda count: count == 1, what="the dead letter")
    wait_for(lambda: ready(ch, n("q")), lambda count: count == 0, what="q to empty")
    _reject_head(ch, n("orphan"))
    # Its ready count was 0 before the reject too; a basic.get on the rejecting channel is
    # answered after the reject on both brokers, so it tells dropped from requeued.
    assert get(ch, n("orphan")) is None

    assert _bodies(ch, n("log")) == ["m"]
    assert ch.is_open


def test_dlx_5_argument_beats_a_later_policy(target):
    ch = target.channel()
    n = target.name
    for queue in ("by-arg", "by-policy"):
        ch.queue_declare(n(queue))
    ch.queue_declare(n("q"), arguments=_to(target, "by-arg"))
    ch.queue_declare(n("p"))
    target.api.set_policy(
        n("dl"),
        target.anchored("q", "p"),
        {"dead-letter-exchange": "", "dead-letter-routing-key": n("by-policy")},
    )
    publish(ch, n("q"), "from-q")
    publish(ch, n("p"), "from-p")

    _reject_head(ch, n("q"))
    _reject_head(ch, n("p"))
    _arrived(ch, n("by-arg"))
    _arrived(ch, n("by-policy"))

    assert (_bodies(ch, n("by-arg")), _bodies(ch, n("by-policy"))) == (["from-q"], ["from-p"])


# -- alternate exchanges -----------------------------------------------------------------------


def test_ae_1_and_2_argument_policy_chain_and_only_when_unrouted(target):
    ch = target.channel()
    n = target.name
    for ae, queue in (("ae-arg", "via-arg"), ("ae-pol", "via-pol"), ("last", "end")):
        ch.exchange_declare(n(ae), "fanout")
        ch.queue_declare(n(queue))
        ch.queue_bind(n(queue), n(ae))
    ch.exchange_declare(n("x-arg"), "direct", arguments={"alternate-exchange": n("ae-arg")})
    ch.exchange_declare(n("x-pol"), "direct")
    ch.exchange_declare(n("middle"), "direct", arguments={"alternate-exchange": n("last")})
    ch.exchange_declare(n("x-chain"), "direct", arguments={"alternate-exchange": n("middle")})
    ch.queue_declare(n("bound"))
    ch.queue_bind(n("bound"), n("x-arg"), "hit")
    target.api.set_policy(
        n("ae"),
        target.anchored("x-arg", "x-pol"),
        {"alternate-exchange": n("ae-pol")},
        apply_to="exchanges",
    )

    publish(ch, "hit", "routed", exchange=n("x-arg"))
    publish(ch, "miss", "arg", exchange=n("x-arg"), delivery_mode=2, headers={"h": "v"})
    publish(ch, "miss", "pol", exchange=n("x-pol"))
    publish(ch, "miss", "chain", exchange=n("x-chain"))

    via_arg = get(ch, n("via-arg"))
    assert via_arg[2] == b"arg"
    assert (via_arg[0].exchange, via_arg[0].routing_key) == (n("x-arg"), "miss")
    assert (via_arg[1].delivery_mode, via_arg[1].headers) == (2, {"h": "v"})
    assert {queue: _bodies(ch, n(queue)) for queue in ("bound", "via-arg", "via-pol", "end")} == {
        "bound": ["routed"],
        "via-arg": [],
        "via-pol": ["pol"],
        "end": ["chain"],
    }


def test_ae_1_and_2_policy_on_amq_exchanges_and_cc_keys_count_as_routed(target):
    ch = target.channel()
    n = target.name
    ch.exchange_declare(n("ae"), "fanout")
    ch.queue_declare(n("unrouted"))
    ch.queue_bind(n("unrouted"), n("ae"))
    ch.exchange_declare(n("x"), "direct", arguments={"alternate-exchange": n("ae")})
    ch.queue_declare(n("by-cc"))
    ch.queue_bind(n("by-cc"), n("x"), "cc-key")
    ch.queue_declare(n("bound"))
    ch.queue_bind(n("bound"), "amq.fanout")  # never empty: the policy must not divert it
    target.api.set_policy(
        n("ae-policy"), "^amq\\.direct$", {"alternate-exchange": n("ae")}, apply_to="exchanges"
    )

    publish(ch, "miss", "cc-routed", exchange=n("x"), headers={"CC": ["cc-key"]})
    publish(ch, n("no-binding"), "via-amq-direct", exchange="amq.direct")
    target.api.delete_policy(n("ae-policy"))

    assert _bodies(ch, n("by-cc")) == ["cc-routed"]
    assert _bodies(ch, n("unrouted")) == ["via-amq-direct"]


def test_ae_1_alternate_exchange_type_text(target):
    connection = target.connect()

    closed = closed_by_broker(
        lambda: connection.channel().exchange_declare(
            target.name("x"), "direct", arguments={"alternate-exchange": 5}
        )
    )

    assert closed == (
        406,
        f"PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in "
        f"exchange '{target.name('x')}' in vhost '/'",
    )


def test_ae_2_and_3_cycles_end_and_mandatory_returns(target):
    ch = target.channel()
    n = target.name
    ch.exchange_declare(n("x"), "direct", arguments={"alternate-exchange": n("u")})
    ch.exchange_declare(n("u"), "direct", arguments={"alternate-exchange": n("v")})
    ch.exchange_declare(n("v"), "topic", arguments={"alternate-exchange": n("x")})
    ch.queue_declare(n("on-v"))
    ch.queue_bind(n("on-v"), n("v"), "only.#")

    with FrameRecorder() as recorder:
        outcomes = [
            publish(ch, "k", "lost", exchange=n("x"), mandatory=True),
            publish(ch, "only.me", "found", exchange=n("x"), mandatory=True),
        ]

    assert outcomes == [RETURNED, ACK]
    (returned,) = [frame.method for frame in recorder.frames if frame.name == "Basic.Return"]
    assert (returned.reply_code, returned.reply_text, returned.exchange) == (
        312,
        "NO_ROUTE",
        n("x"),
    )
    assert _bodies(ch, n("on-v")) == ["found"]


def test_ae_2_transaction_routes_ae_copies_on_commit_only(target):
    ch = target.channel()
    n = target.name
    ch.exchange_declare(n("ae"), "fanout")
    ch.queue_declare(n("unrouted"))
    ch.queue_bind(n("unrouted"), n("ae"))
    ch.exchange_declare(n("x"), "direct", arguments={"alternate-exchange": n("ae")})
    tx = target.channel(confirm=False)
    tx.tx_select()

    publish(tx, "k", "first", exchange=n("x"))
    before = ready(ch, n("unrouted"))
    tx.tx_rollback()
    publish(tx, "k", "second", exchange=n("x"))
    tx.tx_commit()

    assert before == 0
    assert _bodies(ch, n("unrouted")) == ["second"]
