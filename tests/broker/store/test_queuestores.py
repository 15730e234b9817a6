"""QueueStore behaviour within one process: append, ack, purge, read, reopen, compaction."""

from __future__ import annotations

import shutil
import threading

import pytest
from hutch_broker.store import (
    CorruptRecordError,
    MessageNotFoundError,
    StoreClosedError,
    StoredMessage,
    StoreError,
    compaction,
    records,
    segments,
    syncing,
)

SEGMENT = 1024  # the open_store default


@pytest.fixture
def expected(fields):
    def build(index, msg_id, *, body_size=40, **overrides):
        return StoredMessage(msg_id=msg_id, **{**fields(index, body_size=body_size), **overrides})

    return build


def reopen(open_store, store, queue="q"):
    store.close()
    return open_store().open_queue("/", queue)


def test_round_trip_in_append_order_across_segments(open_store, fill, expected, read_back):
    store = open_store()
    queue = store.open_queue("/", "q")
    assert queue.recover() == []
    ids = fill(queue, 100)
    assert ids == sorted(ids)
    assert len({msg_id >> 32 for msg_id in ids}) > 3  # the 1 KiB segments rotated
    queue.sync()

    recovered = read_back(reopen(open_store, store))

    assert recovered == [expected(index, msg_id) for index, msg_id in enumerate(ids)]


def test_close_syncs_what_was_only_buffered(open_store, fill):
    store = open_store()
    queue = store.open_queue("/", "q")
    ids = fill(queue, 5)
    assert queue.dirty

    recovered = reopen(open_store, store).recover()

    assert [message.msg_id for message in recovered] == ids


def test_read_from_buffer_from_disk_and_after_ack(open_store, fill, expected):
    queue = open_store().open_queue("/", "q")
    ids = fill(queue, 30)
    assert queue.read(ids[3]) == expected(3, ids[3])  # still in the userspace buffer
    queue.sync()
    assert queue.read(ids[3]) == expected(3, ids[3])  # from the file
    assert queue.read(ids[29]) == expected(29, ids[29])
    queue.ack(ids[3])
    with pytest.raises(MessageNotFoundError):
        queue.read(ids[3])
    with pytest.raises(MessageNotFoundError):
        queue.read(ids[3] + 1)  # not a record start


def test_segment_and_ack_files_removed_once_fully_acked(open_store, fill, files_of):
    queue = open_store().open_queue("/", "q")
    ids = fill(queue, 60)
    queue.sync()
    first = [msg_id for msg_id in ids if msg_id >> 32 == ids[0] >> 32]
    second = [msg_id for msg_id in ids if msg_id >> 32 == (first[-1] >> 32) + 1]
    queue.ack_many(first[:-1])
    queue.ack(second[0])
    queue.sync()
    assert segments.segment_name(ids[0] >> 32) in files_of(queue)
    assert segments.ack_name(ids[0] >> 32) in files_of(queue, "acks.")

    queue.ack(first[-1])
    assert queue.dirty
    queue.sync()

    assert segments.segment_name(ids[0] >> 32) not in files_of(queue)
    assert segments.ack_name(ids[0] >> 32) not in files_of(queue, "acks.")
    assert queue.dirty  # the directory fsync that makes the unlink durable is still due
    queue.sync()
    assert not queue.dirty


def test_double_and_unknown_acks_change_nothing(open_store, fill):
    store = open_store()
    queue = store.open_queue("/", "q")
    ids = fill(queue, 20)
    queue.ack(ids[0])
    queue.ack(ids[0])
    queue.ack_many([ids[1] + 1, 999 << 32, 0, ids[-1] + 4096])

    recovered = reopen(open_store, store).recover()

    assert [message.msg_id for message in recovered] == ids[1:]


def test_acks_of_a_purged_segment_before_its_unlink_write_nothing(open_store, fill, files_of):
    """A purge retires the segments at once; acks for their messages that arrive before the
    sync unlinks them (a consumer settling what it held) are no-ops, not ack records."""
    store = open_store()
    queue = store.open_queue("/", "q")
    ids = fill(queue, 30)
    queue.sync()
    queue.purge()
    queue.ack_many(ids[:10])
    queue.ack(ids[-1])
    queue.sync()
    assert files_of(queue, "acks.") == []
    assert len(files_of(queue)) == 1  # only the fresh write segment

    assert reopen(open_store, store).recover() == []


def test_acks_survive_restart(open_store, fill):
    store = open_store()
    queue = store.open_queue("/", "q")
    ids = fill(queue, 40)
    queue.sync()
    queue.ack_many(ids[5:30:2])
    queue.sync()

    recovered = reopen(open_store, store).recover()

    gone = set(ids[5:30:2])
    assert [message.msg_id for message in recovered] == [i for i in ids if i not in gone]


def test_purge_drops_every_segment(open_store, fill, files_of):
    store = open_store()
    queue = store.open_queue("/", "q")
    ids = fill(queue, 50)
    queue.sync()
    queue.purge()
    queue.sync()
    assert len(files_of(queue)) == 1  # only the fresh write segment
    assert files_of(queue, "acks.") == []
    later = fill(queue, 3, first=50)
    assert min(later) > max(ids)

    recovered = reopen(open_store, store).recover()

    assert [message.msg_id for message in recovered] == later


def test_ids_keep_increasing_across_restarts_even_when_empty(open_store, fill):
    seen: list[int] = []
    for _ in range(3):
        store = open_store()
        queue = store.open_queue("/", "q")
        assert queue.recover() == []
        ids = fill(queue, 3)
        queue.ack_many(ids)
        seen += ids
        store.close()
    assert seen == sorted(seen)
    assert len(set(seen)) == len(seen)


@pytest.mark.parametrize("segment_size", [64, 1024, 8 * 1024 * 1024])
@pytest.mark.parametrize("body_size", [0, 1, 1000, 1100, 70_000])
def test_messages_of_any_size_round_trip(
    open_store, fill, expected, segment_size, body_size, read_back
):
    store = open_store(segment_size=segment_size)
    queue = store.open_queue("/", "q")
    ids = fill(queue, 3, body_size=body_size)
    assert queue.read(ids[1]) == expected(1, ids[1], body_size=body_size)
    queue.sync()
    assert queue.read(ids[1]) == expected(1, ids[1], body_size=body_size)

    recovered = read_back(reopen(open_store, store))

    assert recovered == [expected(i, ids[i], body_size=body_size) for i in range(3)]


@pytest.mark.slow
def test_sixteen_mebibyte_body_across_small_segments(open_store, fields, read_back):
    store = open_store(segment_size=1024 * 1024)
    queue = store.open_queue("/", "q")
    body = bytes(range(256)) * (16 * 1024 * 1024 // 256)
    small = queue.append(**fields(1))
    big = queue.append(**{**fields(2), "body": body})
    after = queue.append(**fields(3))
    assert len({small >> 32, big >> 32, after >> 32}) == 3
    assert queue.read(big).body == body

    recovered = read_back(reopen(open_store, store))

    assert [message.msg_id for message in recovered] == [small, big, after]
    assert recovered[1].body == body


def test_recover_twice_and_use_after_close_raise(open_store, fill):
    queue = open_store().open_queue("/", "q")
    queue.recover()
    with pytest.raises(StoreError, match="already"):
        queue.recover()
    ids = fill(queue, 1)
    queue.close()
    for call in (lambda: fill(queue, 1), lambda: queue.ack(ids[0]), lambda: queue.read(ids[0])):
        with pytest.raises(StoreClosedError):
            call()
    queue.sync()  # a no-op, like a second close
    queue.close()


def test_names_and_stamps_are_validated(open_store, fields):
    queue = open_store().open_queue("/", "q")
    with pytest.raises(ValueError, match="routing key"):
        queue.append(**{**fields(1), "routing_key": "é" * 128})
    with pytest.raises(ValueError, match="expire_at_ms=-1"):
        queue.append(**{**fields(1), "expire_at_ms": -1})
    with pytest.raises(ValueError, match="enqueued_at_ms=-1"):
        queue.append(**{**fields(1), "enqueued_at_ms": -1})
    for name in ("enqueued_at_ms", "expire_at_ms"):
        with pytest.raises(ValueError, match=f"{name}={1 << 64}"):
            queue.append(**{**fields(1), name: 1 << 64})
    assert queue.recover() == []
    top = queue.append(**{**fields(1), "enqueued_at_ms": (1 << 64) - 1, "expire_at_ms": 0})
    assert queue.read(top).enqueued_at_ms == (1 << 64) - 1, "the bound itself is a stamp"


def test_unicode_fields_round_trip(open_store, fields, read_back):
    store = open_store()
    queue = store.open_queue("/", "q")
    odd = {"exchange": "ex\u00e9\U0001f407", "routing_key": "\ud800lone.surrogate\x00"}
    msg_id = queue.append(**{**fields(1), **odd})

    (recovered,) = read_back(reopen(open_store, store))

    assert (recovered.msg_id, recovered.exchange, recovered.routing_key) == (
        msg_id,
        odd["exchange"],
        odd["routing_key"],
    )


def test_sync_in_a_worker_thread_while_appending(open_store, fill, expected, read_back):
    store = open_store(segment_size=64 * 1024)
    queue = store.open_queue("/", "q")
    done = threading.Event()
    errors: list[BaseException] = []

    def syncer():
        try:
            while not done.is_set():
                store.sync()
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(exc)

    worker = threading.Thread(target=syncer)
    worker.start()
    try:
        ids = fill(queue, 3000)
        queue.ack_many(ids[:1000])
    finally:
        done.set()
        worker.join()
    assert errors == []
    store.sync()
    store.sync()  # the unlinks of the first pass get their directory fsync
    assert not queue.dirty

    recovered = read_back(reopen(open_store, store))

    assert recovered == [expected(i, ids[i]) for i in range(1000, 3000)]


# -- compaction -----------------------------------------------------------------------------


def linger_one_in_ten(queue, fill, count=400):
    """Every tenth message stays unacked: each segment keeps a live record."""
    ids = fill(queue, count)
    queue.sync()
    kept = ids[::10]
    queue.ack_many(msg_id for msg_id in ids if msg_id not in set(kept))
    return kept


def record_size(message_fields):
    return records.record_size(
        exchange=message_fields["exchange"].encode(),
        routing_key=message_fields["routing_key"].encode(),
        raw_properties=message_fields["raw_properties"],
        body=message_fields["body"],
    )


def test_compaction_bounds_disk_use_and_keeps_ids(
    open_store, fields, fill, expected, files_of, read_back
):
    store = open_store()
    queue = store.open_queue("/", "q")
    kept = linger_one_in_ten(queue, fill)
    before = len(files_of(queue))
    for _ in range(20):
        queue.sync()
    after = len(files_of(queue))
    assert after <= before // 2
    disk = sum((queue.directory / name).stat().st_size for name in files_of(queue))
    live = sum(record_size(fields(index * 10)) for index in range(len(kept)))
    assert disk <= 2 * live + (compaction.SLACK_SEGMENTS + 1) * SEGMENT + SEGMENT

    for position, msg_id in enumerate(kept):
        assert queue.read(msg_id) == expected(position * 10, msg_id)
    queue.ack(kept[0])
    recovered = read_back(reopen(open_store, store))

    assert recovered == [expected(i * 10, msg_id) for i, msg_id in enumerate(kept)][1:]


def test_crash_between_compaction_copy_and_unlink(
    open_store, fill, expected, files_of, data_dir, tmp_path
):
    """Originals and their fsynced copies both on disk: each message comes back once."""
    store = open_store()
    queue = store.open_queue("/", "q")
    kept = linger_one_in_ten(queue, fill)
    queue.sync()  # compacts: copies buffered, originals to unlink after the next pass
    copied = [msg_id for msg_id in kept if msg_id in queue._moved]
    assert len(copied) >= 2
    queue.ack(copied[1])  # acked on its copy only
    sync_pass = queue.begin_sync()
    queue.write_records(sync_pass)
    assert syncing.commit(
        [(queue, sync_pass)]
    )  # copies (and the ack) are durable, the originals not unlinked yet
    crashed = tmp_path / "crashed"
    shutil.copytree(data_dir, crashed)
    queue.end_sync(sync_pass)
    assert len(list((crashed / "msgs").glob("*/msgs.*"))) > len(files_of(queue))

    crashed_store = open_store(crashed)
    recovered = crashed_store.open_queue("/", "q")

    survivors = [msg_id for msg_id in kept if msg_id != copied[1]]
    assert [message.msg_id for message in recovered.recover()] == survivors
    assert recovered.read(survivors[-1]) == expected(390, survivors[-1])
    recovered.sync()
    crashed_store.close()
    again = open_store(crashed).open_queue("/", "q")
    assert [message.msg_id for message in again.recover()] == survivors


def test_read_detects_a_record_damaged_on_disk(open_store, fill):
    queue = open_store().open_queue("/", "q")
    ids = fill(queue, 3)
    queue.sync()
    number, offset = records.split_msg_id(ids[1])
    with open(queue.directory / segments.segment_name(number), "r+b") as segment_file:
        segment_file.seek(offset + 60)
        segment_file.write(b"X")
    with pytest.raises(CorruptRecordError):
        queue.read(ids[1])
    assert queue.read(ids[2]).msg_id == ids[2]


def test_a_failed_fsync_stops_the_log(open_store, fill, monkeypatch):
    store = open_store()
    queue = store.open_queue("/", "q")
    other = store.open_queue("/", "other")
    fill(queue, 3)
    fill(other, 3)

    def failing(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(syncing, "_fdatasync", failing)
    with pytest.raises(StoreError, match="fsync failed"):
        store.sync()
    monkeypatch.undo()
    with pytest.raises(StoreError, match="I/O error"):
        fill(queue, 1)  # nothing may be confirmed after a failed fsync
    with pytest.raises(StoreError, match="I/O error"):
        queue.sync()
    store.close()
