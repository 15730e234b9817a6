"""The model reports every durable definitions change, and only those (model/changes.py)."""

from __future__ import annotations

import decimal

import pytest
from hutch_broker.model import policies
from hutch_broker.model.broker import Broker
from hutch_broker.model.changes import Change


@pytest.fixture
def recorded():
    broker = Broker(clock=lambda: 1_700_000_000_000)
    broker.create_defaults()
    seen: list[Change | None] = []
    broker.on_definitions_changed = lambda change=None: seen.append(change)
    return broker, seen


def summary(seen):
    return [(c.section, c.item.get("name", c.item.get("destination")), c.deleted) for c in seen]


def test_transient_and_exclusive_things_are_never_reported(recorded):
    broker, seen = recorded
    vhost = broker.get_vhost("/")
    owner = object()
    vhost.declare_exchange("tx", "topic", durable=False)
    transient, _ = vhost.declare_queue("tq", durable=False)
    exclusive, _ = vhost.declare_queue("xq", durable=True, exclusive_owner=owner)
    vhost.declare_exchange("dx", "topic", durable=True)
    seen.clear()

    vhost.bind("tx", transient, "a")
    vhost.bind("dx", transient, "b")  # durable source, transient destination
    vhost.bind("dx", exclusive, "c")  # durable but exclusive destination
    vhost.unbind("dx", exclusive, "c")
    vhost.update_queue_limits("tq", {"x-max-length": 3})
    vhost.delete_queue("tq")
    vhost.delete_queue("xq")
    vhost.delete_exchange("tx")

    assert seen == []


def test_each_durable_change_is_reported_with_its_item(recorded):
    broker, seen = recorded
    vhost = broker.get_vhost("/")
    vhost.declare_exchange("dx", "topic", durable=True, arguments={"alternate-exchange": "ae"})
    queue, _ = vhost.declare_queue("dq", durable=True, arguments={"x-max-length": 5})
    vhost.bind("dx", queue, "a.#", {"x-flag": b"bytes", "x-n": decimal.Decimal("1.5")})
    vhost.update_queue_limits("dq", {"x-max-length": 9})
    policy, _ = policies.validate(
        {"pattern": "^d", "definition": {"max-length": 3}}, operator=False
    )
    assert policy is not None
    policy.vhost, policy.name = "/", "p"
    vhost.set_policy(policy, operator=False)
    vhost.delete_policy("p", operator=False)
    vhost.delete_exchange("dx")  # takes its binding with it
    broker.put_user("alice", "hash", ["management"])
    broker.set_permission("/", "alice", ".*", "", "")
    broker.set_permission("/", "alice", ".*", ".*", "")
    assert broker.delete_permission("/", "alice")
    assert not broker.delete_permission("/", "alice")  # nothing left to report
    broker.delete_user("alice")

    assert summary(seen) == [
        ("exchanges", "dx", False),
        ("queues", "dq", False),
        ("bindings", "dq", False),
        ("queues", "dq", False),
        ("policies", "p", False),
        ("policies", "p", True),
        ("bindings", "dq", True),
        ("exchanges", "dx", True),
        ("users", "alice", False),
        ("permissions", None, False),
        ("permissions", None, False),
        ("permissions", None, True),
        ("users", "alice", True),
    ]
    assert seen[2].item["arguments"] == {"x-flag": "bytes", "x-n": 1.5}  # JSON-ready
    assert seen[3].item["arguments"] == {"x-max-length": 9}


def test_updating_a_vhost_is_reported(recorded):
    broker, seen = recorded
    broker.add_vhost("/", description="the default one")
    assert seen == [Change("vhosts", {"name": "/", "description": "the default one", "tags": []})]
