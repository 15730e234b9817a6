"""The in-place argument update extension, end to end against a real broker process.

The tests share one broker per module, each in a vhost of its own (``shared_broker``), except the
one that restarts the broker. This folder's ``api`` is the in-memory admin API, so the real
broker's management API is ``vhosts.management_for``: on the shared broker it refuses "/".
"""

import pika
import pytest
from hutch_demo.management import Management, quote
from hutch_testing import vhosts
from hutch_testing.clients import connect, drain

pytestmark = pytest.mark.shared_broker


@pytest.fixture
def mgmt(hutch_broker) -> Management:
    return vhosts.management_for(hutch_broker)


@pytest.mark.own_broker  # it restarts the broker
def test_lowering_max_length_in_place_truncates_and_keeps_the_rest(hutch_broker, mgmt):
    ch = connect(hutch_broker).channel()
    ch.exchange_declare("dlx", "fanout")
    ch.queue_declare("dlq")
    ch.queue_bind("dlq", "dlx")
    ch.queue_declare(
        "q", durable=True, arguments={"x-max-length": 10, "x-dead-letter-exchange": "dlx"}
    )
    for i in range(6):
        ch.basic_publish("", "q", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    arguments = {"x-max-length": 2, "x-dead-letter-exchange": "dlx"}
    assert mgmt.put("/queues/%2F/q/arguments", {"arguments": arguments}).status == 204
    assert mgmt.queue("q")["arguments"] == arguments
    assert drain(ch, "dlq") == [b"0", b"1", b"2", b"3"]
    # survives a restart with the new arguments, and redeclaring with them is equivalent
    hutch_broker.restart()
    ch = connect(hutch_broker).channel()
    ch.queue_declare("q", durable=True, arguments=arguments)
    assert drain(ch, "q") == [b"4", b"5"]


def test_ring_size_lowered_in_place_deletes_nothing_at_once(hutch_broker, vhost, mgmt):
    ch = connect(hutch_broker, vhost=vhost).channel()
    ch.queue_declare("ring", arguments={"x-ring-size": 5})
    for i in range(5):
        ch.basic_publish("", "ring", str(i).encode())
    path = f"/queues/{quote(vhost)}/ring/arguments"
    assert mgmt.put(path, {"arguments": {"x-ring-size": 2}}).status == 204
    assert ch.queue_declare("ring", passive=True).method.message_count == 5
    ch.basic_publish("", "ring", b"5")
    assert drain(ch, "ring") == [b"1", b"2", b"3", b"4", b"5"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            {"arguments": {"x-queue-type": "quorum"}},
            "arguments x-queue-type of queue 'q' in vhost '{vhost}' cannot be changed in place",
        ),
        (
            {"arguments": {"x-max-length": -1}},
            "invalid arg 'x-max-length' for queue 'q' in vhost '{vhost}': {{value_negative,-1}}",
        ),
    ],
)
def test_bad_updates_are_refused_and_change_nothing(hutch_broker, vhost, mgmt, body, reason):
    ch = connect(hutch_broker, vhost=vhost).channel()
    ch.queue_declare("q", arguments={"x-max-length": 3})
    refused = mgmt.put(f"/queues/{quote(vhost)}/q/arguments", body)
    assert refused.status == 400
    assert refused.body["reason"] == reason.format(vhost=vhost)
    assert mgmt.queue("q")["arguments"] == {"x-max-length": 3}


def test_missing_queue_is_404(vhost, mgmt):
    assert mgmt.put(f"/queues/{quote(vhost)}/nope/arguments", {"arguments": {}}).status == 404
