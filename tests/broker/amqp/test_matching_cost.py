"""Adversarial topic bindings and policy patterns do not stall other connections (issue "Broker
trust", items 6 and 7, cost part of the torture suite).

hutch-broker runs on one event loop, so one slow match blocks every client. An adversary binds
`#.#.#.#.#.#.#.#.x`, sets the policy pattern `^(a+)+$`, then publishes 60-word routing keys and
declares queues named `aaa…a-` in a loop; meanwhile a canary connection times its round trips.
Before the fix the first publish alone took minutes.

Why the serial pass (hutch_testing.serial): both tests hold a canary's or a declare's time to a
bound. The refusal of unsearchable and invalid patterns measures nothing and is
test_matching_patterns.py, beside the other worker.
"""

import threading
import time

import pytest
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
