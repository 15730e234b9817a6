"""A durable queue's log directory appears with its first message, durably before any confirm."""

from __future__ import annotations

import os

import pytest
from hutch_broker.store import StoreError, files, layout


def queue_dirs(data_dir):
    return sorted(p.name for p in (data_dir / "msgs").iterdir() if p.is_dir())


def test_a_new_queue_has_no_directory_until_its_first_message(open_store, fill, data_dir):
    store = open_store()
    queue = store.open_queue("/", "q")
    assert queue.recover() == []
    store.sync()
    assert queue_dirs(data_dir) == []
    assert store.existing_queues() == []

    fill(queue, 1)

    assert queue_dirs(data_dir) == [queue.directory.name]
    assert store.existing_queues() == [("/", "q")]


def test_the_first_append_does_not_wait_for_the_disk_the_next_sync_does(
    open_store, fill, data_dir, monkeypatch
):
    fsynced = []
    monkeypatch.setattr(files, "fsync_path", fsynced.append)
    monkeypatch.setattr(os, "fsync", fsynced.append)
    store = open_store()
    queue = store.open_queue("/", "q")

    fill(queue, 3)
    assert fsynced == []

    store.sync()

    root = data_dir / "msgs"
    assert {queue.directory / layout.META_FILE, queue.directory, root} <= set(fsynced)


def test_a_declared_queue_without_directory_recovers_empty(open_store, data_dir):
    store = open_store()
    store.open_queue("/", "idle")
    store.close()
    reopened = open_store()
    assert reopened.existing_queues() == []
    assert reopened.open_queue("/", "idle").recover() == []


def test_lost_metadata_is_rewritten_for_a_queue_still_declared(open_store, fill, data_dir):
    store = open_store()
    queue = store.open_queue("/", "q")
    ids = fill(queue, 4)
    store.close()
    (queue.directory / layout.META_FILE).unlink()  # a power cut before the first sync finished

    reopened = open_store()

    assert reopened.existing_queues() == []  # nobody can tell whose it is
    recovered = reopened.open_queue("/", "q").recover()  # but its queue is declared
    assert [message.msg_id for message in recovered] == ids
    assert reopened.existing_queues() == [("/", "q")]


def test_deleting_a_queue_that_never_held_a_message(open_store, data_dir):
    store = open_store()
    store.open_queue("/", "q")
    store.delete_queue("/", "q")
    assert queue_dirs(data_dir) == []
    store.open_queue("/", "q")  # declared again
    assert queue_dirs(data_dir) == []


def test_a_directory_that_cannot_be_created_stops_the_log(open_store, fill, monkeypatch):
    def failing(root, vhost, queue):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(layout, "create_queue_dir", failing)
    queue = open_store().open_queue("/", "q")
    with pytest.raises(StoreError, match="cannot create"):
        fill(queue, 1)
    with pytest.raises(StoreError, match="I/O error"):
        fill(queue, 1)
