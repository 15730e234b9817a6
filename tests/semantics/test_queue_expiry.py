"""Queue expiry (EXP-1, EXP-2): x-expires and the expires policy.

The lease is a few hundred milliseconds; "still there" checks run for well over one lease while
something renews it, and "gone" checks poll with a generous bound.
"""

import time

import pytest
from hutch_demo.waiting import sleep_until, wait_for
from hutch_testing.clients import connect
from hutch_testing.steps import closed_by_broker, get, publish

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test

LEASE = 400  # ms
LONG = 60_000


def _wait_deleted(api, queue):
    wait_for(lambda: api.queue_exists(queue), lambda exists: not exists, what=f"{queue} deleted")


def _renew_for(seconds, renew):
    """Call ``renew`` every LEASE/4 for ``seconds`` (bounded)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        renew()
        time.sleep(LEASE / 4000)


# -- EXP-1 -------------------------------------------------------------------------------------


def test_exp_1_least_of_argument_policy_and_operator_policy_applies(channel, api):
    api.set_policy("user", "^by-policy$", {"expires": LEASE})
    api.set_policy("ops", "^by-operator$", {"expires": LEASE}, operator=True)
    channel.queue_declare("by-argument", arguments={"x-expires": LEASE})
    channel.queue_declare("by-policy", arguments={"x-expires": LONG})
    channel.queue_declare("by-operator", arguments={"x-expires": LONG})
    channel.queue_declare("no-expiry")

    for queue in ("by-argument", "by-policy", "by-operator"):
        _wait_deleted(api, queue)

    assert api.queue_exists("no-expiry")


def test_exp_1_zero_and_negative_x_expires_are_refused(connection, api, vhost):
    zero = closed_by_broker(
        lambda: connection.channel().queue_declare("q", arguments={"x-expires": 0})
    )
    negative = closed_by_broker(
        lambda: connection.channel().queue_declare("q", arguments={"x-expires": -5})
    )

    assert zero == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'q' in vhost '{vhost}': "
        "{value_zero,0}",
    )
    assert negative == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'q' in vhost '{vhost}': "
        "{value_negative,-5}",
    )
    policy = api.put_policy("p", "q", {"expires": 0})
    assert (policy.status, policy.body) == (
        400,
        {"error": "bad_request", "reason": "Validation failed\n\n0 is not a valid queue expiry\n"},
    )


# -- EXP-2 -------------------------------------------------------------------------------------


def test_exp_2_an_unused_queue_is_deleted_with_its_messages_not_dead_lettered(channel, api):
    channel.queue_declare("dlq")
    channel.queue_declare(
        "q",
        arguments={
            "x-expires": LEASE,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dlq",
        },
    )
    publish(channel, "q", "m1")
    publish(channel, "q", "m2")

    _wait_deleted(api, "q")

    gone = closed_by_broker(lambda: channel.connection.channel().queue_declare("q", passive=True))
    assert gone[0] == 404  # deleted where it was declared, not only missing from the API's view
    assert get(channel, "dlq") is None


def test_exp_2_a_consumer_keeps_the_queue_and_cancel_restarts_the_lease(connection, api):
    channel = connection.channel()
    channel.queue_declare("q", arguments={"x-expires": LEASE})
    tag = channel.basic_consume("q", lambda *_: None)

    _renew_for(2 * LEASE / 1000, lambda: connection.process_data_events(0))
    assert api.queue_exists("q")
    channel.basic_cancel(tag)
    cancelled = time.monotonic()

    _wait_deleted(api, "q")
    assert time.monotonic() - cancelled >= 0.8 * LEASE / 1000


def test_exp_2_passive_declare_renews_the_lease(channel, api):
    channel.queue_declare("q", arguments={"x-expires": LEASE})

    _renew_for(2 * LEASE / 1000, lambda: channel.queue_declare("q", passive=True))

    assert api.queue_exists("q")
    _wait_deleted(api, "q")


def test_exp_2_basic_get_renews_the_lease(channel, api):
    channel.queue_declare("q", arguments={"x-expires": LEASE})

    _renew_for(2 * LEASE / 1000, lambda: channel.basic_get("q", auto_ack=True))

    assert api.queue_exists("q")
    _wait_deleted(api, "q")


def test_exp_2_publishing_does_not_renew_the_lease(channel, api):
    channel.queue_declare("q", arguments={"x-expires": LEASE})
    declared = time.monotonic()
    assert api.queue_exists("q")  # seen where it was declared, so the loop below is not vacuous

    while api.queue_exists("q"):
        assert time.monotonic() - declared < 10, "publishing kept the queue alive"
        publish(channel, "q", "keep-alive?")
        time.sleep(LEASE / 8000)


@pytest.mark.own_broker  # it restarts the broker
def test_exp_2_the_lease_restarts_at_recovery(hutch_broker, api):
    lease = 1000
    channel = connect(hutch_broker).channel()
    channel.queue_declare("q", durable=True, arguments={"x-expires": lease})
    declared = time.monotonic()
    channel.connection.close()

    hutch_broker.stop()
    sleep_until(declared + 1.2 * lease / 1000)  # the old lease ran out while the broker was down
    starting = time.monotonic()
    hutch_broker.start()

    assert api.queue_exists("q")
    _wait_deleted(api, "q")
    assert time.monotonic() - starting >= 0.95 * lease / 1000  # a whole new lease
