"""MessageStore: one log per (vhost, queue) whatever the names, group commit, locking."""

from __future__ import annotations

import os

import pytest
from hutch_broker.store import MessageStore, StoreClosedError, StoreLockedError, layout

HOSTILE_NAMES = [
    ("/", "plain"),
    ("/", ""),
    ("", "/"),
    ("..", ".."),
    ("/", "../../etc/passwd"),
    ("a/b", "c/d"),
    ("vhost\x00nul", "queue\x00nul"),
    ("vh\u00e9", "\U0001f407 rabbit \u00fc\u00e9"),
    ("/", "x" * 255),
    ("\u00e9" * 127, "\u00e9" * 127),
    ("/", "amq.gen-\ud800"),  # a lone surrogate survives the round trip too
    ("/", "CON"),
    ("/", "q.deleted"),
]


def test_hostile_names_get_their_own_safe_directories(open_store, fields, data_dir, read_back):
    store = open_store()
    ids = {}
    for index, (vhost, queue) in enumerate(HOSTILE_NAMES):
        ids[vhost, queue] = store.open_queue(vhost, queue).append(**fields(index))
    directories = {p.name for p in (data_dir / "msgs").iterdir() if p.is_dir()}
    assert len(directories) == len(HOSTILE_NAMES)
    assert all(set(name) <= set("0123456789abcdef") for name in directories)
    store.close()

    reopened = open_store()

    assert reopened.existing_queues() == sorted(HOSTILE_NAMES)
    for index, names in enumerate(HOSTILE_NAMES):
        (message,) = read_back(reopened.open_queue(*names))
        assert (message.msg_id, message.body) == (ids[names], fields(index)["body"])


def test_the_same_log_object_while_open(open_store):
    store = open_store()
    first = store.open_queue("/", "q")
    assert store.open_queue("/", "q") is first
    first.close()
    assert store.open_queue("/", "q") is not first


def test_delete_queue_open_or_not(open_store, fields, data_dir):
    store = open_store()
    store.open_queue("/", "open").append(**fields(1))
    store.open_queue("/", "closed").append(**fields(2))
    store.open_queue("/", "closed").close()
    store.delete_queue("/", "open")
    store.delete_queue("/", "closed")
    store.delete_queue("/", "never existed")
    assert store.existing_queues() == []
    assert [p for p in (data_dir / "msgs").iterdir() if p.name != ".lock"] == []
    assert store.open_queue("/", "open").recover() == []


def test_leftovers_of_a_crash_are_cleaned_at_open(open_store, data_dir):
    open_store().close()
    root = data_dir / "msgs"
    for name in ("0" * 32 + ".deleted", "1" * 32 + ".creating"):
        (root / name).mkdir()
        (root / name / "msgs.0000000001").write_bytes(b"junk")
    (root / ("2" * 32)).mkdir()  # no queue.json: reported by no one

    store = open_store()

    assert sorted(p.name for p in root.iterdir()) == [".lock", "2" * 32]
    assert store.existing_queues() == []


def test_a_second_store_on_the_same_directory_is_refused(open_store, data_dir):
    open_store()
    with pytest.raises(StoreLockedError):
        MessageStore(data_dir)


def test_group_sync_covers_every_dirty_queue(open_store, fill):
    store = open_store()
    queues = [store.open_queue("/", f"q{index}") for index in range(12)]
    ids = {id(queue): fill(queue, 5) for queue in queues}
    store.sync()
    store.sync()
    assert not any(queue.dirty for queue in queues)
    store.close()

    reopened = open_store()

    for index, queue in enumerate(queues):
        recovered = reopened.open_queue("/", f"q{index}").recover()
        assert [message.msg_id for message in recovered] == ids[id(queue)]


def test_closed_store_refuses_work(open_store):
    store = open_store()
    store.close()
    store.close()
    with pytest.raises(StoreClosedError):
        store.open_queue("/", "q")
    with pytest.raises(StoreClosedError):
        store.sync()


@pytest.mark.parametrize("segment_size", [0, 63, 2 << 30])
def test_segment_size_is_validated(data_dir, segment_size):
    with pytest.raises(ValueError, match="segment_size"):
        MessageStore(data_dir, segment_size=segment_size)


def test_queue_directory_hash_separates_name_boundaries(tmp_path):
    root = tmp_path
    assert layout.queue_path(root, "ab", "c") != layout.queue_path(root, "a", "bc")
    assert layout.queue_path(root, "a\x00", "b") != layout.queue_path(root, "a", "\x00b")
    assert not os.path.isabs(layout.queue_path(root, "/", "/").name)
