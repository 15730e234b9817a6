"""Management JSON side by side, with the queue stats' delay (API-5, API-7, API-10, API-11).

Why a module of its own: its test holds hutch-broker's management stats to 1 s from the
publish, a clock against a bound, so it runs in the broker level's serial pass
(hutch_testing.serial); the rest of test_policies_and_management.py measures nothing and runs
beside the other worker.
"""

import json
import time
from pathlib import Path

import pytest
from hutch_demo.waiting import wait_for
from hutch_testing.steps import publish

pytestmark = pytest.mark.rabbitmq

REFERENCE = Path(__file__).resolve().parents[1] / "broker" / "admin" / "reference"
ERLANG_INTERNALS = {
    "backing_queue_status",
    "garbage_collection",
    "reductions",
    "reductions_details",
}


def _reference_keys(name):
    """The keys of a captured 3.10.8 response (of its first item, for a list)."""
    body = json.loads((REFERENCE / name).read_text())
    return set(body[0] if isinstance(body, list) else body)


def test_management_json_key_sets_and_policy_fields(target):
    ch = target.channel()
    api = target.api
    n = target.name
    api.set_policy(n("pol"), target.anchored("q"), {"max-length": 5, "message-ttl": 30_000})
    api.set_policy(
        n("op"), target.anchored("q"), {"max-length": 3, "expires": 3_600_000}, operator=True
    )
    ch.queue_declare(n("q"), durable=True, arguments={"x-max-length": 10})
    ch.exchange_declare(n("x"), "topic", durable=True)
    ch.queue_bind(n("q"), n("x"), "a.*")
    publish(ch, n("q"), "hello", delivery_mode=2)

    created = time.monotonic()
    queue = wait_for(  # RabbitMQ adds idle_since once the queue has gone idle after the publish
        lambda: api.queue(n("q")),
        # and its stats record the message: on a loaded machine 3.10.8 showed a record with
        # messages 0 and messages_persistent 1 first (its stats are emitted per queue, late).
        lambda body: {"messages", "idle_since"} <= set(body) and body["messages"] >= 1,
        timeout=20,
        what="queue stats",
    )
    stats_delay = time.monotonic() - created
    exchange = api.get(f"/exchanges/%2F/{n('x')}").body
    bindings = api.get(f"/queues/%2F/{n('q')}/bindings").body

    assert stats_delay < target.expect("management-stats-delay", hutch=1.0, rabbitmq=20.0)
    omitted = target.expect("erlang-internals", hutch=ERLANG_INTERNALS, rabbitmq=set())
    assert set(queue) == _reference_keys("GET_queues__2F_mgmt.q.json") - omitted
    assert set(exchange) == _reference_keys("GET_exchanges__2F_mgmt.x.json")
    assert [set(binding) for binding in bindings] == [
        _reference_keys("GET_bindings__2F_e_mgmt.x_q_mgmt.q.json")
    ] * 2
    assert (queue["policy"], queue["operator_policy"]) == (n("pol"), n("op"))
    assert queue["effective_policy_definition"] == {
        "max-length": 3,
        "message-ttl": 30_000,
        "expires": 3_600_000,
    }
    assert queue["arguments"] == {"x-max-length": 10}
    assert (queue["messages"], queue["messages_ready"], queue["messages_persistent"]) == (1, 1, 1)
    assert [
        {key: binding[key] for key in ("source", "routing_key", "properties_key")}
        for binding in bindings
    ] == [
        {"source": "", "routing_key": n("q"), "properties_key": n("q")},
        {"source": n("x"), "routing_key": "a.*", "properties_key": "a.%2A"},
    ]
