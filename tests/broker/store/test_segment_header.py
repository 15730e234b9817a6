"""Issue #30 item 12 in the store: the segment header's format versions, its queue identity,
and what a cut tail's log line may claim.

* Version 2 segments (one 20-byte header, no identity) are still read: built here with the
  version 2 writer logic (``records.file_header_v2`` and the record encoding, which did not
  change), never from a binary file.
* A segment whose header names another queue is set aside, never served.
* A cut tail is "never confirmed" only where that is what is known: the newest segment's end,
  torn as a write is, after a run that did not stop cleanly. Everything else is damage, and the
  line says the cut records may have been confirmed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from hutch_broker.store import MessageStore, StoredMessage, layout, records, syncing
from hutch_broker.store.messages import STOPPED_CLEANLY

V2_SALT = 0x0123_4567_89AB_CDEF
SEGMENT = 1024


def v2_log(
    data_dir: Path, queue: str, messages: list[dict], *, acked: tuple[int, ...] = ()
) -> list[int]:
    """A queue log as a version 2 broker left it: segment 1 and its ack file; the msg_ids."""
    directory = layout.queue_path(data_dir / "msgs", "/", queue)
    directory.mkdir(parents=True)
    (directory / layout.META_FILE).write_text(json.dumps({"vhost": "/", "queue": queue}))
    data = bytearray(records.file_header_v2(V2_SALT))
    ids = []
    for fields in messages:
        offset = len(data)
        ids.append((1 << 32) | offset)
        data += records.encode_head(
            seed=records.record_seed(V2_SALT, offset),
            msg_id=ids[-1],
            enqueued_at_ms=fields["enqueued_at_ms"],
            expire_at_ms=fields["expire_at_ms"],
            exchange=fields["exchange"].encode(),
            routing_key=fields["routing_key"].encode(),
            raw_properties=fields["raw_properties"],
            body=fields["body"],
        )
        data += fields["body"]
    (directory / "msgs.0000000001").write_bytes(bytes(data))
    acks = b"".join(records.encode_ack(ids[index] & 0xFFFF_FFFF) for index in acked)
    (directory / "acks.0000000001").write_bytes(acks)
    return ids


def stored(fields, index: int, msg_id: int) -> StoredMessage:
    return StoredMessage(msg_id, **fields(index))


# -- format version 2 ----------------------------------------------------------------------------


def test_a_version_2_log_recovers_and_new_segments_are_version_3(
    data_dir, open_store, fields, fill, read_back, caplog
):
    ids = v2_log(data_dir, "q", [fields(index) for index in range(5)], acked=(1,))
    caplog.set_level(logging.WARNING)

    store = open_store()
    queue = store.open_queue("/", "q")
    live = [index for index in range(5) if index != 1]
    assert read_back(queue) == [stored(fields, i, ids[i]) for i in live]
    queue.ack(ids[0])
    new_ids = fill(queue, 2, first=10)
    store.close()
    assert caplog.records == []

    directory = queue.directory
    old, new = (directory / name for name in ("msgs.0000000001", "msgs.0000000002"))
    assert records.parse_file_header(old.read_bytes()).version == 2  # never rewritten
    header = records.parse_file_header(new.read_bytes())
    assert (header.version, header.identity) == (3, records.queue_identity("/", "q"))
    again = open_store().open_queue("/", "q")
    assert [m.msg_id for m in again.recover()] == [ids[i] for i in live[1:]] + new_ids


def test_a_damaged_version_2_header_is_repaired_in_its_own_format(
    data_dir, open_store, fields, read_back, caplog
):
    ids = v2_log(data_dir, "q", [fields(index) for index in range(3)])
    segment = layout.queue_path(data_dir / "msgs", "/", "q") / "msgs.0000000001"
    damaged = bytearray(segment.read_bytes())
    damaged[17] ^= 0x40  # the checksum: the salt is intact, the records prove it
    segment.write_bytes(bytes(damaged))

    queue = open_store().open_queue("/", "q")

    assert read_back(queue) == [stored(fields, i, ids[i]) for i in range(3)]
    header = records.parse_file_header(segment.read_bytes())
    assert (header.state, header.version, header.salt) == (records.HeaderState.VALID, 2, V2_SALT)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "3 records verify with the salt it holds and are recovered" in line


def test_a_damaged_version_2_salt_still_sets_the_segment_aside(
    data_dir, open_store, fields, caplog
):
    """The limit version 3 removes: version 2 holds one copy of the salt, and no record
    verifies without it (a documented limit of old segments, which drain away)."""
    v2_log(data_dir, "q", [fields(index) for index in range(3)])
    segment = layout.queue_path(data_dir / "msgs", "/", "q") / "msgs.0000000001"
    damaged = bytearray(segment.read_bytes())
    damaged[9] ^= 0x40
    segment.write_bytes(bytes(damaged))

    assert open_store().open_queue("/", "q").recover() == []
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "no record verifies with a salt in it" in line
    assert not segment.exists()


# -- queue identity --------------------------------------------------------------------------------


def two_logs(open_store, fill) -> tuple[Path, Path, list[int], list[int]]:
    """Queues a and b, eight messages each in their segment 1, a's first four acked."""
    store = open_store()
    queue_a, queue_b = store.open_queue("/", "a"), store.open_queue("/", "b")
    ids_a, ids_b = fill(queue_a, 8), fill(queue_b, 8, first=100)
    store.sync()
    queue_a.ack_many(ids_a[:4])
    store.close()
    return queue_a.directory, queue_b.directory, ids_a, ids_b


def test_a_segment_of_another_queue_is_set_aside(open_store, fill, data_dir, caplog):
    dir_a, dir_b, _, ids_b = two_logs(open_store, fill)
    shutil.copyfile(dir_a / "msgs.0000000001", dir_b / "msgs.0000000009")

    served = [m.msg_id for m in open_store().open_queue("/", "b").recover()]

    assert served == ids_b
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert f"{dir_b / 'msgs.0000000009'}: segment of another queue" in line
    assert "its header names queue 'a' in vhost '/', this log is that of queue 'b'" in line
    assert not (dir_b / "msgs.0000000009").exists()
    (entry,) = (data_dir / "quarantine").glob(f"*-{dir_b.name}-msgs.0000000009")
    assert (entry / "msgs.0000000009").read_bytes() == (dir_a / "msgs.0000000001").read_bytes()


def test_a_foreign_segment_with_both_header_copies_damaged_is_still_refused(
    open_store, fill, caplog
):
    """Neither copy verifies, but both name queue a (and the records prove the salt)."""
    dir_a, dir_b, _, ids_b = two_logs(open_store, fill)
    foreign = bytearray((dir_a / "msgs.0000000001").read_bytes())
    foreign[5] ^= 0x01
    foreign[records.COPY_SIZE + 5] ^= 0x01
    (dir_b / "msgs.0000000009").write_bytes(bytes(foreign))

    served = [m.msg_id for m in open_store().open_queue("/", "b").recover()]

    assert served == ids_b
    assert any("segment of another queue" in r.getMessage() for r in caplog.records)


def test_a_queue_identity_unreadable_in_both_copies_keeps_the_messages(
    open_store, fill, read_back, caplog
):
    """Both identity fields damaged, differently: whose segment it is cannot be read. Its salt
    is proven by its records, so they are served (losing them would lose confirmed messages)
    and the line says the identity was unreadable; the header is rewritten as this queue's."""
    _, dir_b, _, ids_b = two_logs(open_store, fill)
    segment = dir_b / "msgs.0000000001"
    damaged = bytearray(segment.read_bytes())
    damaged[25] ^= 0x01
    damaged[records.COPY_SIZE + 30] ^= 0x01
    segment.write_bytes(bytes(damaged))

    served = [m.msg_id for m in open_store().open_queue("/", "b").recover()]

    assert served == ids_b
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "its queue identity is unreadable in both copies" in line
    assert records.parse_file_header(segment.read_bytes()).identity == records.queue_identity(
        "/", "b"
    )


# -- what a cut tail's line says ------------------------------------------------------------------


def crashed_log(tmp_path: Path, fill, *, count: int = 5, acks: int = 0) -> tuple[Path, list[int]]:
    """A data directory as ``kill -9`` leaves it after a sync: (its path, the msg_ids)."""
    live = tmp_path / "live"
    store = MessageStore(live, segment_size=1 << 20)
    try:
        queue = store.open_queue("/", "q")
        ids = fill(queue, count, body_size=60)
        store.sync()
        queue.ack_many(ids[-acks:] if acks else [])
        store.sync()
        crashed = tmp_path / "crashed"
        shutil.copytree(live, crashed, ignore=shutil.ignore_patterns(".lock"))
    finally:
        store.close()
    return crashed, ids


def segment_path(data_dir: Path, number: int = 1) -> Path:
    (directory,) = (data_dir / "msgs").glob("*/")
    return directory / f"msgs.{number:010d}"


def cut_lines(data_dir: Path, caplog) -> list[tuple[str, str]]:
    caplog.clear()
    caplog.set_level(logging.WARNING)
    store = MessageStore(data_dir, segment_size=1 << 20)
    try:
        store.open_queue("/", "q").recover()
    finally:
        store.close()
    return [(r.levelname, r.getMessage()) for r in caplog.records if "tail at offset" in r.message]


def cut_into_last_record(path: Path, ids: list[int], *, record: int = -1) -> None:
    os.truncate(path, (ids[record] & 0xFFFF_FFFF) + 30)


def test_a_torn_tail_after_a_crash_was_never_confirmed(tmp_path, fill, caplog):
    crashed, ids = crashed_log(tmp_path, fill)
    cut_into_last_record(segment_path(crashed), ids)

    ((level, line),) = cut_lines(crashed, caplog)

    assert level == "WARNING"
    assert "the last run did not stop cleanly and this is the end of the newest segment" in line
    assert "never synced, so never confirmed" in line


def test_a_cut_after_a_clean_stop_is_damage_of_possibly_confirmed_records(tmp_path, fill, caplog):
    """The case the issue names: every record was synced (and confirmed), yet the line said
    "never confirmed"."""
    data_dir = tmp_path / "data"
    store = MessageStore(data_dir, segment_size=1 << 20)
    ids = fill(store.open_queue("/", "q"), 5, body_size=60)
    store.close()
    cut_into_last_record(segment_path(data_dir), ids)

    ((level, line),) = cut_lines(data_dir, caplog)

    assert level == "ERROR"
    assert "the last run stopped cleanly, with every record synced, so this is damage" in line
    assert "had been synced and may have been confirmed" in line
    assert "never confirmed" not in line


def test_a_cut_below_an_acked_record_is_damage(tmp_path, fill, caplog):
    crashed, ids = crashed_log(tmp_path, fill, acks=1)  # the last record is acked on disk
    cut_into_last_record(segment_path(crashed), ids, record=-2)

    ((level, line),) = cut_lines(crashed, caplog)

    assert level == "ERROR"
    assert f"acks.0000000001 acks a record at offset {ids[-1] & 0xFFFF_FFFF}" in line


def test_a_complete_record_failing_its_checksum_at_the_end_is_damage(tmp_path, fill, caplog):
    crashed, _ = crashed_log(tmp_path, fill)
    path = segment_path(crashed)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # in the last record's body: complete, but its checksum fails
    path.write_bytes(bytes(data))

    ((level, line),) = cut_lines(crashed, caplog)

    assert level == "ERROR"
    assert "no unfinished record (a complete one fails its checksum)" in line


def test_a_cut_in_an_older_segment_is_damage(tmp_path, fill, caplog):
    live = tmp_path / "live"
    store = MessageStore(live, segment_size=300)  # one record per segment
    queue = store.open_queue("/", "q")
    ids = fill(queue, 3, body_size=200)
    store.sync()
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed, ignore=shutil.ignore_patterns(".lock"))
    store.close()
    cut_into_last_record(segment_path(crashed, ids[0] >> 32), ids, record=0)

    ((level, line),) = cut_lines(crashed, caplog)

    assert level == "ERROR"
    assert "newer segments hold records (a crash tears only the newest one written)" in line


# -- the clean-stop marker --------------------------------------------------------------------


def test_only_a_clean_stop_of_every_log_is_recorded(data_dir, fill):
    marker = data_dir / "msgs" / STOPPED_CLEANLY
    store = MessageStore(data_dir)
    fill(store.open_queue("/", "a"), 2)
    fill(store.open_queue("/", "b"), 2)
    assert not marker.exists()  # removed before this run changed any log
    store.close()
    assert marker.exists()
    store = MessageStore(data_dir)
    store.open_queue("/", "a")
    store.close()
    assert marker.exists()  # b was clean and stayed untouched
    MessageStore(data_dir).close()
    assert marker.exists()  # a run that opened no log leaves the marker as it was

    marker.unlink()  # as a crash leaves the directory: b may hold a torn tail
    MessageStore(data_dir).close()
    assert not marker.exists()  # nor writes one that was not there (a refused start-up)
    store = MessageStore(data_dir)
    store.open_queue("/", "a")
    store.close()
    assert not marker.exists()  # b was not recovered
    store = MessageStore(data_dir)
    store.open_queue("/", "a")
    store.open_queue("/", "b")
    store.close()
    assert marker.exists()


def test_a_failed_log_leaves_no_clean_stop(data_dir, fill, monkeypatch):
    store = MessageStore(data_dir)
    fill(store.open_queue("/", "a"), 2)

    def fail(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(syncing, "_fdatasync", fail)
    with pytest.raises(Exception, match="fsync failed"):
        store.sync()
    monkeypatch.undo()
    store.close()

    assert not (data_dir / "msgs" / STOPPED_CLEANLY).exists()
