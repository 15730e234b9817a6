"""The real broker restarting on definitions this version refuses ("Broker trust": restarts).

Before: a stored policy whose pattern a later version refuses (a backreference, since policy
patterns are searched in linear time) stopped the broker at start-up with
``hutch-broker: policy 'p': pattern uses a backreference ...``, every time: one definition
bricked the restart and every queue with it. Now each stored item that cannot be applied is
set aside in ``<data-dir>/quarantine/`` with an ERROR line, everything else starts, and the item
is asked about once (the start-up compaction drops it from the definitions).
"""

from __future__ import annotations

import json
import signal

import pika
from hutch_broker.store import layout
from hutch_demo.management import Management
from hutch_testing.clients import connect, drain

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _stop_with_everything_in_the_snapshot(broker) -> None:
    """SIGTERM, then a start and stop: start-up compacts the journal into the snapshot."""
    broker.kill(signal.SIGTERM)
    broker.start()
    broker.kill(signal.SIGTERM)


def test_a_refused_stored_definition_is_set_aside_and_the_broker_starts(hutch_broker):
    api = Management(hutch_broker)
    assert api.put_policy("p-ok", "^kept$", {"max-length": 3}).status == 201
    assert api.put_policy("p-bad", "^x", {"max-length": 1}).status == 201
    assert api.put("/users/alice", {"password": "pw", "tags": ""}).ok
    assert api.put("/permissions/%2F/alice", {"configure": "^a", "write": ".*", "read": ".*"}).ok
    channel = connect(hutch_broker).channel()
    channel.confirm_delivery()
    for name in ("kept", "odd"):
        channel.queue_declare(name, durable=True)
        for index in range(2):
            channel.basic_publish("", name, f"{name} {index}".encode(), PERSISTENT)
    channel.connection.close()
    _stop_with_everything_in_the_snapshot(hutch_broker)

    snapshot = hutch_broker.data_dir / "definitions.json"
    document = json.loads(snapshot.read_text())
    for policy in document["policies"]:
        if policy["name"] == "p-bad":
            policy["pattern"] = "^(x)\\1"  # accepted by older versions, refused by this one
    for permission in document["permissions"]:
        if permission["user"] == "alice":
            permission["configure"] = "(a)\\1"
    for queue in document["queues"]:
        if queue["name"] == "odd":
            queue["arguments"] = {"x-max-length": "many"}  # hand-edited: not an integer
    snapshot.write_text(json.dumps(document))

    hutch_broker.start()

    channel = connect(hutch_broker).channel()
    assert drain(channel, "kept") == [b"kept 0", b"kept 1"]
    assert api.queue("kept")["policy"] == "p-ok"
    assert {p["name"] for p in api.get("/policies/%2F").body} == {"p-ok"}
    assert api.get("/users/alice").status == 200
    assert (
        api.get("/permissions/%2F/alice").status == 404
    )  # set aside: alice is denied, not granted
    assert not api.queue_exists("odd")

    console = hutch_broker.console_log.read_text(encoding="utf-8")
    errors = [line for line in console.splitlines() if " ERROR " in line and "recovery:" in line]
    assert any("policy 'p-bad'" in line for line in errors), console
    assert any("permission 'alice'" in line for line in errors), console
    assert any("queue 'odd'" in line for line in errors), console
    quarantine = hutch_broker.data_dir / "quarantine"
    kept = {entry.name.split("-", 1)[1] for entry in quarantine.iterdir()}
    assert {"definition-policy", "definition-permission", "definition-queue"} <= kept
    (policy_entry,) = quarantine.glob("*-definition-policy")
    assert json.loads((policy_entry / "policy.json").read_text())["pattern"] == "^(x)\\1"
    # The queue's message log followed it: set aside as a log no durable queue owns.
    logs = [json.loads(path.read_text()) for path in quarantine.rglob(layout.META_FILE)]
    assert {"vhost": "/", "queue": "odd"} in logs

    entries = sorted(quarantine.iterdir())
    hutch_broker.kill(signal.SIGTERM)
    hutch_broker.start()
    assert sorted(quarantine.iterdir()) == entries  # asked about once, not at every start
    assert drain(connect(hutch_broker).channel(), "kept") == []
