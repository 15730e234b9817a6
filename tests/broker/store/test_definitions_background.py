"""Background compaction of the definitions journal: every crash point recovers every commit.

The store's side of ``BrokerServer._compact_in_background``: appends move to
``definitions.log.next``, a snapshot taken after that (and holding only committed changes) is
written, then swapped in by two renames. Each crash is simulated by leaving the files as the
interrupted step would. The history used deletes and re-declares items around the rotation, so
that replaying the old journal over the new snapshot is exercised (the blind-write argument in
``store/definitions.py``).
"""

from __future__ import annotations

import json
import os

import pytest
from hutch_broker.store import (
    DefinitionsStore,
    StoreError,
    definitions,
    files,
    journal,
    load_definitions,
)

BASE = {
    "rabbit_version": "3.10.8",
    "vhosts": [{"name": "/"}, {"name": "v"}],
    "users": [{"name": "guest", "password_hash": "x", "tags": ["administrator"]}],
    "permissions": [
        {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    ],
    "policies": [],
    "parameters": [],
    "queues": [],
    "exchanges": [],
    "bindings": [],
}


def queue(name, vhost="/", **arguments):
    return {
        "name": name,
        "vhost": vhost,
        "durable": True,
        "auto_delete": False,
        "arguments": arguments,
    }


def state(document):
    """What recovery yields, order aside."""
    return {
        section: sorted(json.dumps(item, sort_keys=True) for item in items)
        if isinstance(items, list)
        else items
        for section, items in document.items()
    }


@pytest.fixture
def store(tmp_path):
    opened = []

    def open_store(**kwargs):
        found = DefinitionsStore(tmp_path, **kwargs)
        opened.append(found)
        return found

    yield open_store
    for found in opened:
        found.close()


class Model:
    """The truth: a keyed copy of what was committed, as the broker's model would export it."""

    def __init__(self, store):
        self.store = store
        self.queues = {}
        self.vhost_v = True

    def put(self, name, vhost="/", **arguments):
        self.queues[vhost, name] = queue(name, vhost, **arguments)
        self.store.stage("queues", queue(name, vhost, **arguments))

    def delete(self, name, vhost="/"):
        item = self.queues.pop((vhost, name))
        self.store.stage("queues", item, deleted=True)

    def delete_vhost_v(self):
        self.queues = {key: item for key, item in self.queues.items() if key[0] != "v"}
        self.vhost_v = False
        self.store.stage("vhosts", {"name": "v"}, deleted=True)

    def export(self):
        vhosts = [{"name": "/"}] + ([{"name": "v"}] if self.vhost_v else [])
        return {**BASE, "vhosts": vhosts, "queues": list(self.queues.values())}


def history_until_the_swap(store):
    """Old journal, rotation, a fuzzy export, more commits: the model and the ticket."""
    first = store()
    assert first.recover() is None
    model = Model(first)
    first.compact(model.export())
    for index in range(5):
        model.put(f"q{index}")
        model.put(f"q{index}", "v")
    model.delete("q0")
    first.commit()

    ticket = first.begin_compaction()
    assert first.compacting
    assert not first.compaction_due
    model.put("after-rotation")
    first.commit()
    exported = model.export()  # the export: starts after the rotation, everything committed
    model.delete("q1")  # changes after the export, only in .next
    model.put("q2", **{"x-max-length": 7})
    model.put("q0")
    model.delete_vhost_v()
    first.commit()
    return first, model, ticket, exported


def test_appends_move_to_the_next_journal_and_the_old_one_is_frozen(store):
    first, model, _, _ = history_until_the_swap(store)
    old_journal = first.journal_path.read_bytes()
    model.put("later")
    first.commit()
    assert first.journal_path.read_bytes() == old_journal
    assert first.next_journal_path.stat().st_size > journal.FILE_HEADER_SIZE
    assert state(store().recover()) == state(model.export())


def test_crash_before_the_snapshot_rename(store):
    first, model, _, exported = history_until_the_swap(store)
    temp = files.write_temp(first.snapshot_path, definitions._snapshot_bytes(exported))
    # Killed here: a temporary file, the old snapshot, both journals.
    assert state(store().recover()) == state(model.export())
    os.unlink(temp)


def test_crash_between_the_two_renames(store):
    """New snapshot + old journal + .next: the old records replay over a newer snapshot."""
    first, model, _, exported = history_until_the_swap(store)
    definitions.files.write_atomically(first.snapshot_path, definitions._snapshot_bytes(exported))
    assert first.journal_path.stat().st_size > journal.FILE_HEADER_SIZE
    assert state(store().recover()) == state(model.export())


def test_after_the_swap_the_snapshot_and_the_next_journal_are_all(store):
    first, model, ticket, exported = history_until_the_swap(store)
    size = first.write_compaction(ticket, exported)
    first.finish_compaction(ticket, size)
    assert not first.next_journal_path.exists()
    assert load_definitions(first.snapshot_path) == exported
    assert not first.compacting
    assert state(store().recover()) == state(model.export())
    model.put("after-the-swap")  # the same descriptor, now under definitions.log
    first.commit()
    assert state(store().recover()) == state(model.export())
    assert not first.next_journal_path.exists()


def test_a_synchronous_compaction_cancels_the_background_one(store):
    first, model, ticket, exported = history_until_the_swap(store)
    first.compact(model.export())
    assert not first.next_journal_path.exists()
    assert first.write_compaction(ticket, exported) is None  # the late rename never lands
    first.finish_compaction(ticket, None)
    assert load_definitions(first.snapshot_path) == model.export()
    assert [p.name for p in first.snapshot_path.parent.glob(".*.tmp")] == []
    model.put("next")
    first.commit()
    assert state(store().recover()) == state(model.export())


def test_crash_in_the_synchronous_compaction_after_its_reset(store, monkeypatch):
    """The reset is written, .next not yet removed: .next's records replay after the reset."""
    first, model, _, _ = history_until_the_swap(store)

    def crash(path, *args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(type(first.next_journal_path), "unlink", crash)
    with pytest.raises(RuntimeError):
        first.compact(model.export())
    monkeypatch.undo()
    assert first.next_journal_path.exists()
    assert state(store().recover()) == state(model.export())


def test_a_leftover_next_journal_takes_the_appends_until_a_compaction(store):
    first, model, _, _ = history_until_the_swap(store)
    first.close()
    second = store()
    model.store = second
    assert state(second.recover()) == state(model.export())
    assert second.compaction_due
    assert not second.can_compact_in_background
    with pytest.raises(StoreError):
        second.begin_compaction()
    model.put("appended-after-the-leftover")
    second.commit()
    assert state(store().recover()) == state(model.export())
    second.compact(model.export())
    assert not second.next_journal_path.exists()
    assert state(store().recover()) == state(model.export())


def test_a_failed_background_write_leaves_a_recoverable_pair(store, monkeypatch):
    first, model, ticket, exported = history_until_the_swap(store)

    def full_disk(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "write_temp", full_disk)
    with pytest.raises(OSError, match="No space"):
        first.write_compaction(ticket, exported)
    first.finish_compaction(ticket, None)
    monkeypatch.undo()
    assert first.compaction_due  # only a synchronous compaction is trusted now
    assert state(store().recover()) == state(model.export())
    first.compact(model.export())
    assert state(store().recover()) == state(model.export())
