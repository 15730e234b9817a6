"""definitions.json + definitions.log: replay, torn tails, damage, compaction crash points.

Each crash is simulated by leaving the files exactly as the interrupted step would: a journal
cut at a byte offset, a flipped byte, or a compaction stopped before one of its renames.
"""

from __future__ import annotations

import json
import logging
import os

import pytest
from hutch_broker.store import (
    CorruptDefinitionsError,
    DefinitionsStore,
    StoreError,
    UnsupportedFormatError,
    definitions,
    journal,
    load_definitions,
)

BASE = {
    "rabbit_version": "4.0.0",
    "vhosts": [{"name": "/"}, {"name": "v\u00e9\U0001f407"}],
    "users": [{"name": "guest", "password_hash": "x", "tags": ["administrator"]}],
    "permissions": [
        {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    ],
    "policies": [],
    "parameters": [],
    "queues": [
        {"name": "q0", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}
    ],
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


def binding(source, destination, key="", vhost="/", **arguments):
    return {
        "source": source,
        "vhost": vhost,
        "destination": destination,
        "destination_type": "queue",
        "routing_key": key,
        "arguments": arguments,
    }


def names(document, section):
    return [item.get("name", item.get("destination")) for item in document[section]]


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


@pytest.fixture
def compacted(store):
    """A directory holding BASE as its snapshot and an empty journal."""
    first = store()
    assert first.recover() is None
    first.compact(BASE)
    return first


def test_first_start_has_nothing(store, tmp_path):
    assert store().recover() is None
    assert list(tmp_path.iterdir()) == []


def test_changes_replay_onto_the_snapshot(compacted, store):
    compacted.stage("queues", queue("q1", **{"x-max-length": 5}))
    compacted.stage("queues", queue("q2"))
    compacted.stage("exchanges", {"name": "x", "vhost": "/", "type": "topic", "durable": True})
    compacted.stage("bindings", binding("x", "q1", "a.#"))
    compacted.stage("bindings", binding("x", "q1", "a.#", **{"x-match": "all"}))  # another one
    compacted.stage("queues", queue("q1", **{"x-max-length": 9}))  # replaced in place
    compacted.stage("queues", queue("q0"), deleted=True)
    compacted.stage("bindings", binding("x", "q1", "a.#"), deleted=True)
    compacted.commit()

    recovered = store().recover()

    assert recovered["queues"] == [
        queue("q1", **{"x-max-length": 9}),
        queue("q2"),
    ]
    assert recovered["bindings"] == [binding("x", "q1", "a.#", **{"x-match": "all"})]
    assert recovered["rabbit_version"] == "4.0.0"
    assert recovered["users"] == BASE["users"]


def test_deleting_a_vhost_or_user_takes_what_belongs_to_it(compacted, store):
    vhost = "v\u00e9\U0001f407"
    compacted.stage("queues", queue("inside", vhost=vhost))
    compacted.stage("bindings", binding("x", "inside", vhost=vhost))
    compacted.stage(
        "permissions", {"user": "guest", "vhost": vhost, "configure": "", "write": "", "read": ""}
    )
    compacted.stage("vhosts", {"name": vhost}, deleted=True)
    compacted.stage("users", {"name": "guest"}, deleted=True)
    compacted.commit()

    recovered = store().recover()

    assert names(recovered, "vhosts") == ["/"]
    assert names(recovered, "queues") == ["q0"]
    assert recovered["bindings"] == []
    assert recovered["users"] == []
    assert recovered["permissions"] == []


def test_a_vhost_named_none_takes_only_its_own_items(compacted, store):
    compacted.stage("vhosts", {"name": "None"})
    compacted.stage("queues", queue("mine", vhost="None"))
    compacted.stage("vhosts", {"name": "None"}, deleted=True)
    compacted.commit()
    recovered = store().recover()
    assert names(recovered, "vhosts") == ["/", "v\u00e9\U0001f407"]
    assert names(recovered, "queues") == ["q0"]


def test_one_commit_is_one_write_and_one_fdatasync(compacted, monkeypatch):
    synced, written = [], []
    real_write = os.write
    monkeypatch.setattr(definitions, "_fdatasync", synced.append)
    monkeypatch.setattr(
        os, "write", lambda fd, data: written.append(len(data)) or real_write(fd, data)
    )
    for index in range(500):
        compacted.stage("queues", queue(f"q{index}"))
    compacted.commit()
    compacted.commit()  # nothing staged: no I/O at all
    assert len(synced) == 1
    assert len(written) == 1
    assert compacted.records_committed == 500


def test_torn_tail_at_every_byte_of_the_last_record(compacted, store, tmp_path, caplog):
    compacted.stage("queues", queue("q1"))
    compacted.commit()
    before = compacted.journal_path.stat().st_size
    compacted.stage("queues", queue("q2"))
    compacted.commit()
    complete = compacted.journal_path.read_bytes()
    compacted.close()
    caplog.set_level(logging.WARNING)

    for size in range(before, len(complete)):
        compacted.journal_path.write_bytes(complete[:size])
        reopened = store()
        recovered = reopened.recover()
        assert names(recovered, "queues") == ["q0", "q1"], size
        assert compacted.journal_path.stat().st_size == before  # the tail is cut off
        reopened.stage("queues", queue("q3"))  # appends land right after the last good one
        reopened.commit()
        reopened.close()
        assert names(store().recover(), "queues") == ["q0", "q1", "q3"]

    assert "torn tail" in caplog.text


def test_zero_filled_tail_is_a_torn_tail(compacted, store):
    compacted.stage("queues", queue("q1"))
    compacted.commit()
    with open(compacted.journal_path, "ab") as file:
        file.write(b"\x00" * 4096)  # the size grew, the data never landed
    assert names(store().recover(), "queues") == ["q0", "q1"]


def test_damage_in_the_middle_refuses_to_start(compacted, store):
    offsets = []
    for index in (1, 2, 3):
        offsets.append(compacted.journal_path.stat().st_size)
        compacted.stage("queues", queue(f"q{index}"))
        compacted.commit()
    damaged = bytearray(compacted.journal_path.read_bytes())
    damaged[offsets[1] + journal.HEADER_SIZE + 5] ^= 0x01  # a bit flip inside q2's record
    compacted.journal_path.write_bytes(bytes(damaged))

    with pytest.raises(CorruptDefinitionsError, match=f"truncate the file to {offsets[1]}"):
        store().recover()
    assert compacted.journal_path.read_bytes() == bytes(damaged)  # the evidence is untouched

    # Following the message's advice starts from the prefix.
    os.truncate(compacted.journal_path, offsets[1])
    assert names(store().recover(), "queues") == ["q0", "q1"]


def test_a_record_that_makes_no_sense_is_an_error(compacted, store):
    with open(compacted.journal_path, "ab") as file:
        file.write(journal.encode_record(b'{"op": "put", "section": "queues", "item": {}}'))
    with pytest.raises(CorruptDefinitionsError, match="record 0"):
        store().recover()


def test_an_unknown_operation_is_a_newer_format(compacted, store):
    with open(compacted.journal_path, "ab") as file:
        file.write(journal.encode_record(b'{"op": "rename"}'))
    with pytest.raises(UnsupportedFormatError, match="rename"):
        store().recover()


@pytest.mark.parametrize(
    ("header", "error"),
    [(b"HDEF\x02\x00\x00\x00", UnsupportedFormatError), (b"garbage!", CorruptDefinitionsError)],
)
def test_a_bad_journal_header_is_never_guessed_around(compacted, store, header, error):
    compacted.journal_path.write_bytes(header)
    with pytest.raises(error):
        store().recover()


def test_an_empty_journal_file_is_an_empty_journal(compacted, store):
    compacted.journal_path.write_bytes(b"")
    reopened = store()
    assert reopened.recover() == {**BASE}
    reopened.stage("queues", queue("q1"))
    reopened.commit()
    assert names(store().recover(), "queues") == ["q0", "q1"]


def test_a_snapshot_from_an_older_broker_gets_a_journal(store, tmp_path):
    definitions.save_definitions(tmp_path / "definitions.json", BASE)
    first = store()
    assert first.recover() == BASE
    first.stage("queues", queue("q1"))
    first.commit()
    assert names(store().recover(), "queues") == ["q0", "q1"]


class CrashError(Exception):
    pass


def crash_at(monkeypatch, step, *, after):
    """Make compaction's ``step``-th atomic write (0, 1, 2) crash before or after its rename."""
    real = definitions.files.write_atomically
    calls = iter(range(10))

    def write(path, data):
        index = next(calls)
        if index == step and not after:
            raise CrashError
        real(path, data)
        if index == step and after:
            raise CrashError

    monkeypatch.setattr(definitions.files, "write_atomically", write)


@pytest.mark.parametrize("after", [False, True], ids=["before-rename", "after-rename"])
@pytest.mark.parametrize("step", [0, 1, 2])
def test_compaction_crash_points(compacted, store, monkeypatch, tmp_path, step, after):
    compacted.stage("queues", queue("q1"))
    compacted.stage("queues", queue("q0"), deleted=True)
    compacted.commit()
    old_state = store().recover()
    # What the model holds now: q1 deleted and q9 declared by changes only the compaction
    # carries. Replaying the old journal over it would bring q1 back.
    new_state = {**old_state, "queues": [queue("q9")]}
    crash_at(monkeypatch, step, after=after)

    with pytest.raises(CrashError):
        compacted.compact(new_state)
    monkeypatch.undo()

    recovered = store().recover()
    survived_step_0 = step > 0 or after
    assert recovered == (new_state if survived_step_0 else old_state)
    assert compacted.compaction_due  # the store does not trust itself until a compaction succeeds
    compacted.stage("queues", queue("q5"))
    with pytest.raises(StoreError):
        compacted.commit()


def test_compaction_leaves_the_snapshot_and_an_empty_journal(compacted, store):
    compacted.stage("queues", queue("q1"))
    compacted.commit()
    document = store().recover()
    compacted.compact(document)
    assert load_definitions(compacted.snapshot_path) == document
    assert compacted.journal_path.read_bytes() == journal.FILE_HEADER
    assert store().recover() == document
    compacted.stage("queues", queue("q2"))  # the new journal takes appends
    compacted.commit()
    assert names(store().recover(), "queues") == ["q0", "q1", "q2"]


def test_compaction_is_due_once_the_journal_outgrows_the_snapshot(store):
    small = store(min_compaction_bytes=4096)
    small.recover()
    big = {**BASE, "queues": [queue(f"q{index:04d}") for index in range(100)]}
    small.compact(big)
    snapshot_size = small.snapshot_path.stat().st_size
    assert snapshot_size > 4096
    while small.journal_path.stat().st_size <= snapshot_size:
        assert not small.compaction_due
        small.stage("queues", queue("again"))
        small.commit()
    assert small.compaction_due


def test_a_failed_commit_stops_appends_until_a_compaction(compacted, store, monkeypatch):
    compacted.stage("queues", queue("q1"))

    def failing(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(definitions, "_fdatasync", failing)
    with pytest.raises(OSError, match="Input/output"):
        compacted.commit()
    monkeypatch.undo()
    assert compacted.compaction_due
    with pytest.raises(StoreError, match="I/O error"):
        compacted.commit()
    state = {**BASE, "queues": [queue("q0"), queue("q1")]}
    compacted.compact(state)
    compacted.stage("queues", queue("q2"))
    compacted.commit()
    assert names(store().recover(), "queues") == ["q0", "q1", "q2"]


def test_records_are_framed_json(compacted):
    compacted.stage("queues", queue("\u00fc\ud800"))  # a lone surrogate survives too
    compacted.commit()
    data = compacted.journal_path.read_bytes()
    found = journal.scan(data)
    assert found.valid_end == len(data)
    record = json.loads(found.payloads[-1].decode("utf-8", "surrogatepass"))
    assert record == {"op": "put", "section": "queues", "item": queue("\u00fc\ud800")}
