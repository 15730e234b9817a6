"""Adversarial topic bindings and policy patterns do not stall other connections (issue "Broker
trust", items 6 and 7, cost part of the torture suite).

hutch-broker runs on one event loop, so one slow match blocks every client. An adversary binds
`#.#.#.#.#.#.#.#.x`, sets the policy pattern `^(a+)+$`, then publishes 60-word routing keys and
declares queues named `aaa…a-` in a loop; meanwhile a canary connection times its round trips.
Before the fix the first publish alone took minutes.
"""

import threading
import time

import pytest
from hutch_demo.management import quote
from hutch_testing.clients import connect, drain

# One broker per module, each test in a vhost of its own: the canary and the adversary share the
# test's vhost, and a stalled event loop would stall every vhost alike.
pytestmark = pytest.mark.shared_broker

CANARY_BOUND_SECONDS = 1.0  # a loopback round trip takes about 1 ms; the exponential match minutes
ADVERSARIAL_BINDING = "#.#.#.#.#.#.#.#.x"
NESTED_PATTERN = "^(a+)+$"


def _adversary(broker, vhost, rounds: int, done: threading.Event, failures: list[BaseException]):
    try:
        conn = connect(broker, vhost=vhost)
        channel = conn.channel()
        for index in range(rounds):
            words = ["a"] * 60 + [f"w{index}"]  # a new key each time: the route cache never hits
            channel.basic_publish("amq.topic", ".".join(words), b"miss")
            channel.queue_declare("a" * (30 + index) + "-", auto_delete=True)
        channel.basic_publish("amq.topic", ".".join(["a"] * 60 + ["x"]), b"hit")
        conn.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the test thread
        failures.append(exc)
    finally:
        done.set()


def test_canary_round_trips_stay_fast_during_adversarial_publishes_and_declares(
    hutch_broker, vhost, api
):
    api.set_policy("nested", NESTED_PATTERN, {"max-length": 5})
    canary = connect(hutch_broker, vhost=vhost).channel()
    canary.queue_declare("canary")
    canary.queue_declare("target")
    canary.queue_bind("target", "amq.topic", ADVERSARIAL_BINDING)

    done, failures = threading.Event(), []
    adversary = threading.Thread(target=_adversary, args=(hutch_broker, vhost, 40, done, failures))
    adversary.start()
    slowest = 0.0
    while not done.is_set():
        started = time.perf_counter()
        canary.queue_declare("canary", passive=True)
        slowest = max(slowest, time.perf_counter() - started)
    adversary.join(timeout=10)

    assert failures == []
    assert slowest < CANARY_BOUND_SECONDS
    assert drain(canary, "target") == [b"hit"]
    assert api.queue("a" * 30 + "-")["policy"] is None


def test_nested_pattern_policy_applies_only_where_it_matches(hutch_broker, vhost, api):
    api.set_policy("nested", NESTED_PATTERN, {"max-length": 5})
    channel = connect(hutch_broker, vhost=vhost).channel()
    started = time.perf_counter()
    channel.queue_declare("a" * 30 + "-")
    channel.queue_declare("a" * 30)
    elapsed = time.perf_counter() - started

    assert elapsed < CANARY_BOUND_SECONDS
    assert api.queue("a" * 30 + "-")["policy"] is None
    assert api.queue("a" * 30)["policy"] == "nested"


def test_unsearchable_and_invalid_patterns_get_400_and_change_nothing(hutch_broker, vhost, api):
    replies = {
        pattern: api.put_policy("p", pattern, {"max-length": 1})
        for pattern in (r"(a)\1", "(", "(" * 5000 + ")" * 5000)
    }
    operator_reply = api.put_policy("op", "^(?!tmp)", {"max-length": 1}, operator=True)

    assert {pattern[:8]: reply.status for pattern, reply in replies.items()} == {
        r"(a)\1": 400,
        "(": 400,
        "((((((((": 400,
    }
    assert (
        replies[r"(a)\1"]
        .body["reason"]
        .startswith(
            "Validation failed\n\npattern uses a backreference, which hutch-broker does not support"
        )
    )
    assert (
        replies["("]
        .body["reason"]
        .startswith("Validation failed\n\npattern should be regular expression but is invalid: ")
    )
    assert operator_reply.status == 400
    assert api.get(f"/policies/{quote(vhost)}").body == []
    assert api.get(f"/operator-policies/{quote(vhost)}").body == []
    assert "Traceback" not in hutch_broker.log_tail()
