"""Adversarial topic bindings and policy patterns do not stall other connections (issue "Broker
trust", items 6 and 7, cost part of the torture suite).

hutch-broker runs on one event loop, so one slow match blocks every client. An adversary binds
`#.#.#.#.#.#.#.#.x`, sets the policy pattern `^(a+)+$`, then publishes 60-word routing keys and
declares queues named `aaa…a-` in a loop; meanwhile a canary connection times its round trips.
Before the fix the first publish alone took minutes.

Why the serial pass (hutch_testing.serial): both tests hold a canary's or a declare's time to a
bound: its wall clock less the time the broker's loop thread and the test's thread waited for a
CPU (hutch_testing.cpuwait), the loaded machine's share; a loop busy matching waits for none. The refusal of unsearchable and invalid patterns measures nothing and is
test_matching_patterns.py, beside the other worker.
"""

import threading

import pytest
from hutch_testing import cpuwait
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
    stopwatch = cpuwait.Stopwatch(cpuwait.loop_pid(hutch_broker))
    slowest = slowest_wall = 0.0
    while not done.is_set():
        stopwatch.start()
        canary.queue_declare("canary", passive=True)
        wall, own = stopwatch.stop()
        slowest, slowest_wall = max(slowest, own), max(slowest_wall, wall)
    adversary.join(timeout=10)

    assert failures == []
    assert slowest < CANARY_BOUND_SECONDS, f"{slowest:.3f} s ({slowest_wall:.3f} s wall clock)"
    assert drain(canary, "target") == [b"hit"]
    assert api.queue("a" * 30 + "-")["policy"] is None


def test_nested_pattern_policy_applies_only_where_it_matches(hutch_broker, vhost, api):
    api.set_policy("nested", NESTED_PATTERN, {"max-length": 5})
    channel = connect(hutch_broker, vhost=vhost).channel()
    stopwatch = cpuwait.Stopwatch(cpuwait.loop_pid(hutch_broker))
    stopwatch.start()
    channel.queue_declare("a" * 30 + "-")
    channel.queue_declare("a" * 30)
    wall, elapsed = stopwatch.stop()

    assert elapsed < CANARY_BOUND_SECONDS, f"{elapsed:.3f} s ({wall:.3f} s wall clock)"
    assert api.queue("a" * 30 + "-")["policy"] is None
    assert api.queue("a" * 30)["policy"] == "nested"
