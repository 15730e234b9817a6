"""Policies and operator policies over /api/policies and /api/operator-policies (POL-1..POL-8)."""

import time

import pytest
from hutch_demo.management import quote
from hutch_demo.waiting import wait_for
from hutch_testing.steps import get, publish, publish_all, ready

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test

REFERENCE_POLICY_KEYS = ["vhost", "name", "pattern", "apply-to", "definition", "priority"]


def _bodies(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2])
    return found


def _names(values):
    return [str(value).encode() for value in values]


# -- POL-1 -------------------------------------------------------------------------------------


def test_pol_1_policy_object_defaults_and_key_order(api, vhost):
    created = api.put(
        f"/policies/{quote(vhost)}/p", {"pattern": "^q", "definition": {"max-length": 1}}
    )
    updated = api.put(
        f"/policies/{quote(vhost)}/p",
        {"pattern": "^q", "definition": {"max-length": 2}, "priority": 3},
    )

    policy = api.get(f"/policies/{quote(vhost)}/p").body

    assert (created.status, updated.status) == (201, 204)
    assert list(policy) == REFERENCE_POLICY_KEYS
    assert policy == {
        "vhost": vhost,
        "name": "p",
        "pattern": "^q",
        "apply-to": "all",
        "definition": {"max-length": 2},
        "priority": 3,
    }
    assert api.get(f"/policies/{quote(vhost)}").body == [policy]
    assert api.delete(f"/policies/{quote(vhost)}/p").status == 204
    assert api.get(f"/policies/{quote(vhost)}/p").status == 404


APPLIES_TO_A_CLASSIC_QUEUE = {
    "all": True,
    "queues": True,
    "classic_queues": True,
    "quorum_queues": False,
    "streams": False,
    "exchanges": False,
}


def test_pol_1_apply_to_values(channel, api):
    for apply_to in APPLIES_TO_A_CLASSIC_QUEUE:
        api.set_policy(apply_to, f"^{apply_to}$", {"max-length": 1}, apply_to=apply_to)
        channel.queue_declare(apply_to)
        publish_all(channel, apply_to, ["1", "2"])

    applied = {name: api.queue(name)["policy"] == name for name in APPLIES_TO_A_CLASSIC_QUEUE}
    kept = {name: ready(channel, name) for name in APPLIES_TO_A_CLASSIC_QUEUE}

    assert applied == APPLIES_TO_A_CLASSIC_QUEUE
    assert kept == {name: 1 if applies else 2 for name, applies in applied.items()}


# -- POL-2 -------------------------------------------------------------------------------------


def test_pol_2_pattern_is_searched_unanchored(channel, api):
    api.set_policy("p", "pol", {"max-length": 1})
    channel.queue_declare("app.pol")
    channel.queue_declare("app.other")

    assert api.queue("app.pol")["policy"] == "p"
    assert api.queue("app.other")["policy"] is None


def test_pol_2_only_the_highest_priority_policy_of_each_kind_applies(channel, api):
    api.set_policy("low", "^q$", {"max-length": 1}, priority=1)
    api.set_policy("high", "^q$", {"message-ttl": 60_000}, priority=2)
    api.set_policy("ops-low", "^q$", {"max-length": 2}, priority=1, operator=True)
    api.set_policy("ops-high", "^q$", {"expires": 60_000}, priority=5, operator=True)
    channel.queue_declare("q")

    publish_all(channel, "q", ["1", "2", "3"])

    queue = api.queue("q")
    assert (queue["policy"], queue["operator_policy"]) == ("high", "ops-high")
    assert queue["effective_policy_definition"] == {"message-ttl": 60_000, "expires": 60_000}
    assert ready(channel, "q") == 3  # neither max-length applies


def test_pol_2_matching_happens_at_creation_and_at_every_policy_change(channel, api):
    channel.queue_declare("before")
    api.set_policy("p", "^(before|after)$", {"max-length": 1})
    channel.queue_declare("after")
    assert (api.queue("before")["policy"], api.queue("after")["policy"]) == ("p", "p")

    api.set_policy("p", "^after$", {"max-length": 1})

    assert (api.queue("before")["policy"], api.queue("after")["policy"]) == (None, "p")


# -- POL-3 -------------------------------------------------------------------------------------


def test_pol_3_other_rabbitmq_keys_are_accepted_without_effect(channel, api):
    response = api.put_policy(
        "p", "^q$", {"queue-mode": "lazy", "delivery-limit": 1, "ha-mode": "all"}
    )
    channel.queue_declare("q")
    publish(channel, "q", "m")

    for _ in range(3):  # a delivery-limit would drop it after the first redelivery
        method, _props, _body = get(channel, "q", auto_ack=False)
        channel.basic_nack(method.delivery_tag, requeue=True)

    assert response.status == 201
    assert ready(channel, "q") == 1


def test_pol_3_every_effective_user_key_is_accepted(api, vhost):
    definition = {
        "message-ttl": 1000,
        "expires": 100_000,
        "max-length": 10,
        "max-length-bytes": 1000,
        "overflow": "reject-publish",
        "dead-letter-exchange": "dlx",
        "dead-letter-routing-key": "dl",
        "alternate-exchange": "ae",
        "ring-size": 5,
    }

    response = api.put_policy("p", "^q$", definition, apply_to="all")

    assert response.status == 201
    assert api.get(f"/policies/{quote(vhost)}/p").body["definition"] == definition


# -- POL-4 -------------------------------------------------------------------------------------


def test_pol_4_operator_policy_keys(api, vhost):
    accepted = {
        "expires": 100_000,
        "message-ttl": 1000,
        "max-length": 10,
        "max-length-bytes": 1000,
        "ring-size": 5,
        "delivery-limit": 3,
        "max-in-memory-length": 10,
        "max-in-memory-bytes": 100,
    }

    ok = api.put_policy("ops", "^q$", accepted, operator=True)
    overflow = api.put_policy("bad", "^q$", {"overflow": "reject-publish"}, operator=True)
    # 3.10.8 does not recognise these in an operator policy (tests/sidebyside/
    # test_policy_stream_keys.py); Hutch used to accept and ignore them.
    for key in ("ha-mode", "target-group-size"):
        refused = api.put_policy("bad", "^q$", {key: 2}, operator=True)
        assert (refused.status, refused.body["reason"]) == (
            400,
            f'Validation failed\n\n[{{<<"{key}">>,2}}] are not recognised policy settings\n',
        )

    assert ok.status == 201
    assert overflow.status == 400
    assert overflow.body == {
        "error": "bad_request",
        "reason": "Validation failed\n\n"
        '[{<<"overflow">>,<<"reject-publish">>}] are not recognised policy settings\n',
    }
    assert api.get(f"/operator-policies/{quote(vhost)}/bad").status == 404


# -- POL-5 -------------------------------------------------------------------------------------


def test_pol_5_merge_takes_the_lesser_and_keys_from_either_side(channel, api):
    api.set_policy("user", "^q$", {"max-length": 5, "message-ttl": 60_000})
    api.set_policy("ops", "^q$", {"max-length": 3, "expires": 600_000}, operator=True)
    channel.queue_declare("q")

    publish_all(channel, "q", [str(i) for i in range(10)])

    assert api.queue("q")["effective_policy_definition"] == {
        "max-length": 3,
        "message-ttl": 60_000,
        "expires": 600_000,
    }
    assert _bodies(channel, "q") == _names([7, 8, 9])


# -- POL-6 -------------------------------------------------------------------------------------


def test_pol_6_length_limits_are_the_min_of_argument_and_policy(channel, api):
    api.set_policy("tighter", "^tighter$", {"max-length": 2}, operator=True)
    api.set_policy("looser", "^looser$", {"max-length": 9}, operator=True)
    for queue in ("tighter", "looser"):
        channel.queue_declare(queue, arguments={"x-max-length": 4})
        publish_all(channel, queue, [str(i) for i in range(10)])

    assert _bodies(channel, "tighter") == _names([8, 9])
    assert _bodies(channel, "looser") == _names([6, 7, 8, 9])


def test_pol_6_overflow_argument_beats_the_policy(channel, confirms, api):
    api.set_policy("p", "^q", {"max-length": 1, "overflow": "drop-head"})
    channel.queue_declare("q-arg", arguments={"x-overflow": "reject-publish"})
    channel.queue_declare("q-pol")

    outcomes = [publish(confirms, queue, body) for queue in ("q-arg", "q-pol") for body in "ab"]

    assert outcomes == ["ack", "nack", "ack", "ack"]
    assert (_bodies(channel, "q-arg"), _bodies(channel, "q-pol")) == ([b"a"], [b"b"])


def test_pol_6_effective_policy_definition_excludes_arguments(channel, api):
    api.set_policy("ops", "^q$", {"max-length": 3}, operator=True)
    channel.queue_declare("q", arguments={"x-max-length": 10})
    channel.queue_declare("no-policy")

    queue, bare = api.queue("q"), api.queue("no-policy")

    assert queue["arguments"] == {"x-max-length": 10}
    assert queue["effective_policy_definition"] == {"max-length": 3}
    assert (queue["policy"], queue["operator_policy"]) == (None, "ops")
    assert (bare["policy"], bare["operator_policy"], bare["effective_policy_definition"]) == (
        None,
        None,
        {},
    )


# -- POL-7 -------------------------------------------------------------------------------------


def test_pol_7_deleting_a_policy_exposes_a_lower_priority_one(channel, api):
    api.set_policy("low", "^q$", {"max-length": 2}, priority=1)
    api.set_policy("high", "^q$", {"max-length": 5}, priority=2)
    channel.queue_declare("q")
    publish_all(channel, "q", [str(i) for i in range(5)])
    assert ready(channel, "q") == 5

    api.delete_policy("high")

    assert api.queue("q")["policy"] == "low"
    assert _bodies(channel, "q") == _names([3, 4])


def test_pol_7_new_expires_restarts_the_lease(channel, api):
    channel.queue_declare("q")
    idle_since = time.monotonic()
    time.sleep(1.2)  # idle longer than the lease about to be set
    # The lease is a second, not the quarter second it was: the check below must come within
    # it of the policy's answer, and a loaded machine can take a quarter second for that.

    api.set_policy("exp", "^q$", {"expires": 1000})
    assert api.queue_exists("q")

    wait_for(lambda: api.queue_exists("q"), lambda exists: not exists, what="queue expiry")
    assert time.monotonic() - idle_since > 2.2


def test_pol_7_dead_letter_settings_apply_from_the_next_event(channel, api):
    channel.queue_declare("dlq")
    channel.queue_declare("q")
    publish_all(channel, "q", ["before", "after"])
    method, _props, _body = get(channel, "q", auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)  # no DLX yet: dropped

    api.set_policy("dl", "^q$", {"dead-letter-exchange": "", "dead-letter-routing-key": "dlq"})
    method, _props, _body = get(channel, "q", auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)

    assert _bodies(channel, "dlq") == [b"after"]


def test_pol_7_lowered_max_length_bytes_truncates_at_once(channel, api):
    channel.queue_declare("q")
    publish_all(channel, "q", ["aa", "bb", "cc"])

    api.set_policy("bytes", "^q$", {"max-length-bytes": 4})

    assert _bodies(channel, "q") == [b"bb", b"cc"]


# -- POL-8 -------------------------------------------------------------------------------------


INVALID_POLICIES = [
    ({"pattern": "q", "definition": {"max-length": -1}}, "-1 is not a valid maximum length"),
    (
        {"pattern": "q", "definition": {"no-such-key": 1}},
        '[{<<"no-such-key">>,1}] are not recognised policy settings',
    ),
    ({"pattern": "q", "definition": {"message-ttl": -5}}, "-5 is not a valid message TTL"),
    (
        {"pattern": "q", "definition": {"max-length": 1}, "apply-to": "x"},
        "apply-to 'x' unrecognised; should be one of: 'queues', 'classic_queues',  "
        "'quorum_queues', 'streams', 'exchanges', or 'all'",
    ),
    ({"pattern": "q", "definition": {}}, "no policy provided"),
    ({"pattern": "q", "definition": {"expires": 0}}, "0 is not a valid queue expiry"),
    (
        {"pattern": "q", "definition": {"dead-letter-exchange": 5}},
        "5 is not a valid dead letter exchange name",
    ),
    (
        {"pattern": "q", "definition": {"alternate-exchange": 5}},
        "5 is not a valid alternate exchange name",
    ),
    (
        {"pattern": "q", "definition": {"queue-mode": "bad"}},
        '<<"bad">> is not a valid queue-mode value',
    ),
    (
        {"pattern": "q", "definition": {"max-length": 1}, "priority": "high"},
        'priority should be a number, actually was <<"high">>',
    ),
]


def test_pol_8_invalid_policies_are_400_and_change_nothing(channel, api, vhost):
    api.set_policy("p", "^q$", {"max-length": 1})
    channel.queue_declare("q")

    for body, detail in INVALID_POLICIES:
        response = api.put(f"/policies/{quote(vhost)}/p", body)

        assert response.status == 400
        assert response.body == {
            "error": "bad_request",
            "reason": f"Validation failed\n\n{detail}\n",
        }
    bad_pattern = api.put_policy("p", "(unclosed", {"max-length": 2})
    assert bad_pattern.status == 400
    assert bad_pattern.body["reason"].startswith(
        "Validation failed\n\npattern should be regular expression but is invalid"
    )
    assert api.get(f"/policies/{quote(vhost)}/p").body["definition"] == {"max-length": 1}
    assert api.queue("q")["effective_policy_definition"] == {"max-length": 1}
