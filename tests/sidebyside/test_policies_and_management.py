"""Policies, operator policies and management JSON side by side (POL-*, API-*, RING-1)."""

import pytest
from hutch_demo.management import quote
from hutch_demo.waiting import wait_for
from hutch_testing.steps import closed_by_broker, get, publish, ready
from pika.exceptions import ConnectionClosedByBroker

pytestmark = pytest.mark.rabbitmq

POLICY_KEYS = ["vhost", "name", "pattern", "apply-to", "definition", "priority"]
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


def _bodies(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2].decode())
    return found


def _publish_numbers(channel, queue, count):
    for index in range(count):
        publish(channel, queue, str(index))


def _validation(detail):
    return {"error": "bad_request", "reason": f"Validation failed\n\n{detail}\n"}


# -- policy objects (POL-1, API-11) ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["policies", "operator-policies"])
def test_pol_1_policy_objects(target, kind):
    api = target.api
    path = f"/{kind}/%2F/{target.name('p')}"
    body = {"pattern": target.anchored("q"), "definition": {"max-length": 2}, "apply-to": "queues"}

    created = api.put(path, body)
    updated = api.put(path, {**body, "priority": 3})
    item = api.get(path).body
    listed = [entry for entry in api.get(f"/{kind}/%2F").body if entry["name"] == target.name("p")]
    deleted = api.delete(path)
    missing = api.get(path)

    assert (created.status, created.body, updated.status, updated.body) == (201, None, 204, None)
    assert list(item) == POLICY_KEYS
    assert item == {
        "vhost": "/",
        "name": target.name("p"),
        "pattern": target.anchored("q"),
        "apply-to": "queues",
        "definition": {"max-length": 2},
        "priority": 3,
    }
    assert listed == [item]
    assert (deleted.status, missing.status, missing.body) == (204, 404, NOT_FOUND)


def test_pol_8_validation_texts(target):
    api = target.api
    name = target.name("p")

    negative = api.put_policy(name, "x", {"max-length": -1})
    unknown = api.put_policy(name, "x", {"no-such-key": 1})
    operator_overflow = api.put_policy(name, "x", {"overflow": "reject-publish"}, operator=True)
    empty = api.put(f"/policies/%2F/{name}", {"pattern": "x", "definition": {}})

    assert (negative.status, negative.body) == (
        400,
        _validation("-1 is not a valid maximum length"),
    )
    unknown_detail = target.expect(
        "policy-error-escaping",
        hutch='[{<<"no-such-key">>,1}] are not recognised policy settings',
        rabbitmq='[{&lt;&lt;"no-such-key"&gt;&gt;,1}] are not recognised policy settings',
    )
    assert (unknown.status, unknown.body) == (400, _validation(unknown_detail))
    assert (operator_overflow.status, operator_overflow.body) == (
        400,
        _validation('[{<<"overflow">>,<<"reject-publish">>}] are not recognised policy settings'),
    )
    assert (empty.status, empty.body) == (400, _validation("no policy provided"))
    assert api.get(f"/policies/%2F/{name}").status == 404


def test_pol_8_validation_texts_for_each_key(target):
    api = target.api
    escaped = target.expect("policy-error-escaping", hutch=False, rabbitmq=True)

    def erlang(text):
        return text.replace("<<", "&lt;&lt;").replace(">>", "&gt;&gt;") if escaped else text

    cases = {
        "message-ttl": (-5, "-5 is not a valid message TTL"),
        "expires": (0, "0 is not a valid queue expiry"),
        "max-length-bytes": (-1, "-1 is not a valid maximum length in bytes"),
        "overflow": ("nope", erlang('<<"nope">> is not a valid overflow value')),
        "dead-letter-exchange": (5, "5 is not a valid dead letter exchange name"),
        "dead-letter-routing-key": (5, "5 is not a valid dead letter routing key"),
        "alternate-exchange": (5, "5 is not a valid alternate exchange name"),
        "queue-mode": ("bad", erlang('<<"bad">> is not a valid queue-mode value')),
    }

    observed = {
        key: api.put_policy(target.name("p"), "x", {key: value})
        for key, (value, _) in cases.items()
    }
    priority = api.put(
        f"/policies/%2F/{target.name('p')}",
        {"pattern": "x", "definition": {"max-length": 1}, "priority": "high"},
    )

    assert {key: (r.status, r.body) for key, r in observed.items()} == {
        key: (400, _validation(detail)) for key, (_value, detail) in cases.items()
    }
    assert (priority.status, priority.body) == (
        400,
        _validation(erlang('priority should be a number, actually was <<"high">>')),
    )


def test_pol_8_missing_pattern_or_definition(target):
    path = f"/policies/%2F/{target.name('p')}"

    no_pattern = target.api.put(path, {"definition": {"max-length": 1}})
    no_definition = target.api.put(path, {"pattern": "x"})

    assert (no_pattern.status, no_pattern.body) == (
        400,
        {"error": "bad_request", "reason": "[{key_missing,pattern}]"},
    )
    assert (no_definition.status, no_definition.body) == (
        400,
        {"error": "bad_request", "reason": "[{key_missing,definition}]"},
    )


def test_pol_1_apply_to_queue_type_values(target):
    response = target.api.put_policy(
        target.name("p"), target.anchored("q"), {"max-length": 1}, apply_to="classic_queues"
    )

    expected = target.expect(
        "apply-to-queue-types",
        hutch=(201, None),
        rabbitmq=(
            400,
            _validation(
                "apply-to 'classic_queues' unrecognised; should be 'queues', 'exchanges' or 'all'"
            ),
        ),
    )
    assert (response.status, response.body) == expected


# -- matching and merging (POL-2, POL-5, POL-6, POL-7) -----------------------------------------


def test_pol_2_unanchored_pattern_and_only_the_highest_priority_applies(target):
    ch = target.channel()
    api = target.api
    queue = target.name("app.pol")
    api.set_policy(target.name("low"), target.name("app.po"), {"max-length": 1}, priority=1)
    api.set_policy(target.name("high"), "pol$", {"message-ttl": 60_000}, priority=2)
    ch.queue_declare(queue)
    ch.queue_declare(target.name("other"))

    _publish_numbers(ch, queue, 3)
    _publish_numbers(ch, target.name("other"), 2)

    assert ready(ch, queue) == 3  # the higher-priority policy has no max-length
    api.delete_policy(target.name("high"))
    wait_for(lambda: ready(ch, queue), lambda count: count == 1, what="the exposed policy")
    assert _bodies(ch, queue) == ["2"]
    assert ready(ch, target.name("other")) == 2


def test_pol_5_user_and_operator_max_length_merge_to_the_lesser(target):
    ch = target.channel()
    q = target.name("q")
    target.api.set_policy(target.name("user"), target.anchored("q"), {"max-length": 5})
    target.api.set_policy(
        target.name("ops"), target.anchored("q"), {"max-length": 3}, operator=True
    )
    ch.queue_declare(q)

    _publish_numbers(ch, q, 10)

    assert _bodies(ch, q) == ["7", "8", "9"]


def test_pol_6_operator_policy_caps_but_never_loosens_arguments(target):
    ch = target.channel()
    n = target.name
    target.api.set_policy(n("tight"), target.anchored("tight"), {"max-length": 2}, operator=True)
    target.api.set_policy(n("loose"), target.anchored("loose"), {"max-length": 9}, operator=True)
    for queue in ("tight", "loose"):
        ch.queue_declare(n(queue), arguments={"x-max-length": 4})
        _publish_numbers(ch, n(queue), 10)

    assert _bodies(ch, n("tight")) == ["8", "9"]
    assert _bodies(ch, n("loose")) == ["6", "7", "8", "9"]


def test_pol_6_overflow_and_dlx_arguments_beat_the_user_policy(target):
    ch = target.channel()
    n = target.name
    target.api.set_policy(
        n("p"), target.anchored("arg", "pol"), {"max-length": 1, "overflow": "drop-head"}
    )
    ch.queue_declare(n("arg"), arguments={"x-overflow": "reject-publish"})
    ch.queue_declare(n("pol"))

    outcomes = [publish(ch, n(queue), body) for queue in ("arg", "pol") for body in "ab"]

    assert outcomes == ["ack", "nack", "ack", "ack"]
    assert (_bodies(ch, n("arg")), _bodies(ch, n("pol"))) == (["a"], ["b"])


# -- ring queues (a difference: docs/contracts/broker.md#differences) ---------------------------


def test_ring_size_argument_and_policy_key(target):
    ch = target.channel()
    q = target.name("q")
    ch.queue_declare(q, arguments={"x-ring-size": 2})
    _publish_numbers(ch, q, 4)

    policy = target.api.put_policy(target.name("ring"), target.anchored("other"), {"ring-size": 2})

    kept = target.expect("ring-size", hutch=["2", "3"], rabbitmq=["0", "1", "2", "3"])
    assert _bodies(ch, q) == kept
    assert policy.status == target.expect("ring-size", hutch=201, rabbitmq=400)


# -- features Hutch refuses (docs/contracts/broker.md#differences) ------------------------------


def test_unsupported_queue_features_and_maximum_message_size(target):
    connection = target.connect()
    q = target.name("q")
    connection.channel().queue_declare(q)

    stream = connection.channel()
    try:
        queue_type = closed_by_broker(
            lambda: stream.queue_declare(
                target.name("sq"), durable=True, arguments={"x-queue-type": "stream"}
            )
        )
    except AssertionError:
        queue_type = "declared"
    big = bytes(16 * 1024 * 1024 + 1)
    channel = connection.channel()
    try:
        size = closed_by_broker(lambda: (publish(channel, q, big), channel.queue_declare(q)))
    except AssertionError:
        size = "accepted"

    assert queue_type == "declared"  # streams: tests/sidebyside/test_streams.py
    assert size == target.expect(
        "maximum-message-size",
        hutch=(
            406,
            "PRECONDITION_FAILED - message size 16777217 is larger than configured max size "
            "16777216",
        ),
        rabbitmq="accepted",
    )


# -- management JSON (API-5, API-7, API-10, API-11) --------------------------------------------


def test_exchange_json_names_its_policy_and_creator(target):
    ch = target.channel()
    n = target.name
    target.api.set_policy(
        n("ae"), target.anchored("x"), {"alternate-exchange": n("ae")}, apply_to="exchanges"
    )
    ch.exchange_declare(n("x"), "direct")

    exchange = target.api.get(f"/exchanges/%2F/{n('x')}").body

    assert exchange.get("policy") == n("ae")
    assert exchange["user_who_performed_action"] == "guest"


def test_management_force_closes_a_connection(target):
    """DELETE /api/connections/{name} with X-Reason: the client gets 320 and the reason."""
    label = target.name("victim")
    victim = target.connect(client_properties={"connection_name": label})
    victim.channel()

    def named() -> list[str]:
        listing = target.api.get("/connections").body or []
        return [
            c["name"] for c in listing if c["client_properties"].get("connection_name") == label
        ]

    # RabbitMQ lists a connection once its statistics are emitted (every 5 s by default).
    [name] = wait_for(named, lambda found: len(found) == 1, timeout=15, what=label)
    reply = target.api.request(
        "DELETE", f"/connections/{quote(name)}", headers={"X-Reason": "maintenance"}
    )
    assert reply.status == 204
    with pytest.raises(ConnectionClosedByBroker) as closed:
        victim.process_data_events(time_limit=5)
    assert (closed.value.reply_code, closed.value.reply_text) == (
        320,
        "CONNECTION_FORCED - maintenance",
    )


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/queues/{vhost}/q", {}),
        ("PUT", "/exchanges/{vhost}/x", {"type": "direct"}),
        ("PUT", "/policies/{vhost}/p", {"pattern": "^x", "definition": {"max-length": 1}}),
        ("PUT", "/operator-policies/{vhost}/p", {"pattern": "^x", "definition": {"max-length": 1}}),
        ("POST", "/bindings/{vhost}/e/amq.direct/q/q", {}),
    ],
)
def test_a_write_that_creates_in_a_missing_vhost_says_vhost_not_found(target, method, path, body):
    """rabbitmqctl and hutchctl tell "no such vhost" from these bodies; reads of a missing vhost
    answer the generic 404 (test_parameters.py)."""
    missing = target.name("missing-vh")
    reply = target.api.request(method, path.format(vhost=quote(missing)), body)
    assert (reply.status, reply.body) == (404, {"error": "not_found", "reason": "vhost_not_found"})
    assert target.api.get(f"/vhosts/{quote(missing)}").status == 404  # and nothing was made
