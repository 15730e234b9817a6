"""The journal rebuilds exactly what export_definitions(durable_only=True) + import round-trip.

A model broker is wired to a DefinitionsStore the way the server wires it, goes through every
kind of change, and the replayed journal must equal the model's own durable export, item for
item, before and after importing it into a fresh broker, and after a compaction.
"""

from __future__ import annotations

import json

import pytest
from hutch_broker.model.broker import Broker
from hutch_broker.model.changes import Change
from hutch_broker.store import DefinitionsStore, load_definitions


def clock():
    return 1_700_000_000_000


def by_section(document):
    """Items per section as sorted JSON texts: equal lists mean equal multisets of items."""
    return {
        section: sorted(json.dumps(item, sort_keys=True) for item in items)
        for section, items in document.items()
        if isinstance(items, list)
    }


def import_policy(broker, vhost, name, definition, *, operator=False):
    item = {"vhost": vhost, "name": name, "pattern": f"^{name}", "definition": definition}
    key = "parameters" if operator else "policies"
    if operator:
        item = {"vhost": vhost, "name": name, "component": "operator_policy", "value": item}
    broker.import_definitions({key: [item]})


def exercise(broker: Broker) -> None:
    """Every kind of change, transient and exclusive things mixed in, some undone again."""
    broker.add_vhost("v2", description="second", tags=["t"])
    broker.add_vhost("doomed")
    broker.put_user("alice", "hash-a", ["management"])
    broker.put_user("bob", "hash-b", [])
    broker.set_permission("v2", "alice", ".*", ".*", "")
    broker.set_permission("/", "bob", "", "", ".*")
    broker.set_permission("v2", "alice", "^a", ".*", ".*")  # replaced
    broker.set_permission("/", "alice", ".*", "", "")
    broker.delete_permission("/", "alice")
    import_policy(broker, "/", "lim", {"max-length": 10})
    import_policy(broker, "v2", "ttl", {"message-ttl": 1000})
    import_policy(broker, "/", "gone", {"expires": 1000})
    import_policy(broker, "/", "op", {"max-length": 99}, operator=True)
    import_policy(broker, "/", "op-gone", {"max-length": 1}, operator=True)
    for vhost_name in ("/", "v2", "doomed"):
        vhost = broker.get_vhost(vhost_name)
        vhost.declare_exchange("ae", "fanout", durable=True)
        vhost.declare_exchange("dx", "topic", durable=True, arguments={"alternate-exchange": "ae"})
        vhost.declare_exchange("hx", "headers", durable=True, internal=True)
        vhost.declare_exchange("tx", "direct", durable=False)
        vhost.declare_exchange("auto", "fanout", durable=True, auto_delete=True)
        dq, _ = vhost.declare_queue("dq", durable=True, arguments={"x-max-length": 5})
        lq, _ = vhost.declare_queue("lq", durable=True, arguments={"x-queue-mode": "lazy"})
        tq, _ = vhost.declare_queue("tq", durable=False)
        xq, _ = vhost.declare_queue("xq", durable=True, exclusive_owner=object())
        gone, _ = vhost.declare_queue("gone", durable=True)
        vhost.bind("dx", dq, "a.#")
        vhost.bind("dx", dq, "b.*")
        vhost.bind("dx", lq, "a.#")
        vhost.bind("hx", dq, "", {"x-match": "any", "k": "v"})
        vhost.bind("hx", dq, "", {"x-match": "all", "k": "v"})
        vhost.bind("dx", vhost.get_exchange("hx"), "h.#")  # exchange to exchange
        vhost.bind("dx", tq, "t")
        vhost.bind("dx", xq, "x")
        vhost.bind("dx", gone, "g")
        vhost.bind("auto", lq, "")
        vhost.bind("tx", dq, "")
        vhost.unbind("dx", dq, "b.*")
        vhost.unbind("auto", lq, "")  # its last binding: the auto-delete exchange goes
        vhost.update_queue_limits("dq", {"x-max-length": 7, "x-message-ttl": 60000})
        vhost.delete_queue("gone")  # with its binding
        vhost.delete_queue("tq")
    broker.get_vhost("/").delete_exchange("hx")  # with the bindings on both sides
    broker.get_vhost("/").delete_policy("gone", operator=False)
    broker.get_vhost("/").delete_policy("op-gone", operator=True)
    broker.get_vhost("v2").declare_queue("dq2", durable=True)
    broker.delete_user("bob")
    broker.delete_vhost("doomed")
    broker.add_vhost("doomed")  # back, empty
    broker.add_vhost("v2", description="second, edited")


@pytest.fixture
def wired(tmp_path):
    """A model broker whose changes go to a DefinitionsStore, as in BrokerServer."""
    store = DefinitionsStore(tmp_path)
    assert store.recover() is None
    broker = Broker(clock=clock)
    broker.create_defaults()
    store.compact(broker.export_definitions(durable_only=True))

    def listener(change: Change | None = None) -> None:
        assert change is not None, "the model could not say what changed"
        store.stage(change.section, change.item, deleted=change.deleted)

    broker.on_definitions_changed = listener
    yield broker, store
    store.close()


def test_replayed_journal_equals_the_durable_export(wired, tmp_path):
    broker, store = wired
    exercise(broker)
    store.commit()
    expected = broker.export_definitions(durable_only=True)

    replayed = DefinitionsStore(tmp_path).recover()

    assert replayed is not None
    assert by_section(replayed) == by_section(expected)
    assert [item["name"] for item in replayed["queues"]] == [
        item["name"] for item in expected["queues"]
    ]
    rebuilt = Broker(clock=clock)
    rebuilt.import_definitions(replayed, source="amqp")
    assert rebuilt.export_definitions(durable_only=True) == expected


def test_the_journal_holds_only_what_changed(wired):
    broker, store = wired
    exercise(broker)
    store.commit()
    before = store.bytes_committed
    broker.get_vhost("/").declare_queue("one-more", durable=True)
    broker.get_vhost("/").declare_queue("transient", durable=False)
    store.commit()
    assert store.records_committed > 0
    assert store.bytes_committed - before < 200  # one small record, not the definitions


def test_compaction_writes_the_export_as_the_snapshot(wired, tmp_path):
    broker, store = wired
    exercise(broker)
    store.commit()
    expected = broker.export_definitions(durable_only=True)

    store.compact(expected)

    assert load_definitions(store.snapshot_path) == expected
    assert DefinitionsStore(tmp_path).recover() == expected
