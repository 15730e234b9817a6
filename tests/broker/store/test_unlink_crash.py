"""A crash while a retired segment is deleted is a normal crash, never damage.

Deleting a segment touches two files (``msgs.N`` and ``acks.N``), so a ``kill -9`` can land
between the steps. The torture suite saw "ack file without its segment (the segment was lost)"
ERRORs and quarantine entries after 5 of 93 ordinary kills. These tests take a snapshot of the
data directory before every rename or unlink the store makes in a queue directory (what
``kill -9`` at that point leaves: it keeps every syscall made so far), recover each snapshot and
require a silent recovery with exactly the messages that were live: no WARNING or ERROR, no
quarantine entry, no acked message back, no live message lost.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hutch_broker.store import MessageStore, QueueStore, records, segments


@pytest.fixture
def crash_points(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[Callable[[], None]], list[Path]]:
    """Run an action; before every rename or unlink it makes under ``data_dir/msgs``, copy
    ``data_dir`` aside: the crashed data directories, one per step, plus the state after the
    last step."""
    msgs = (data_dir / "msgs").resolve()
    real_unlink, real_rename = os.unlink, os.rename

    def run(action: Callable[[], None]) -> list[Path]:
        snapshots: list[Path] = []

        def snapshot(path: object) -> None:
            if Path(os.fspath(path)).resolve().is_relative_to(msgs):  # type: ignore[call-overload]
                target = tmp_path / f"crash-{len(snapshots)}"
                shutil.copytree(data_dir, target, ignore=shutil.ignore_patterns(".lock"))
                snapshots.append(target)

        def unlink(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            snapshot(path)
            return real_unlink(path, *args, **kwargs)

        def rename(source, target, *args, **kwargs):  # type: ignore[no-untyped-def]
            snapshot(source)
            return real_rename(source, target, *args, **kwargs)

        monkeypatch.setattr(os, "unlink", unlink)
        monkeypatch.setattr(os, "rename", rename)
        try:
            action()
        finally:
            monkeypatch.setattr(os, "unlink", real_unlink)
            monkeypatch.setattr(os, "rename", real_rename)
        snapshot(msgs)
        return snapshots

    return run


def recover_quietly(
    crashed: Path, caplog: pytest.LogCaptureFixture, *, segment_size: int
) -> list[int]:
    """Open a crashed data directory; the live msg_ids, after checking nothing was reported."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hutch_broker"):
        store = MessageStore(crashed, segment_size=segment_size)
        try:
            queue = store.open_queue("/", "q")
            live = [message.msg_id for message in queue.recover()]
            for msg_id in live:
                queue.read(msg_id)  # every body still readable
            queue.sync()
        finally:
            store.close()
    loud = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert loud == [], f"{crashed.name}: a normal crash reported as damage: {loud}"
    assert not (crashed / "quarantine").exists(), f"{crashed.name}: quarantined"
    leftovers = []
    for queue_dir in (crashed / "msgs").glob("*/"):
        names = {path.name for path in queue_dir.iterdir()}
        leftovers += [
            name
            for name in names
            if name != "queue.json"
            and segments.parse_number(name, segments.SEGMENT_PREFIX) is None
            and not (
                segments.parse_number(name, segments.ACK_PREFIX) is not None
                and name.replace(segments.ACK_PREFIX, segments.SEGMENT_PREFIX) in names
            )
        ]
    assert leftovers == [], f"{crashed.name}: recovery left {leftovers}"
    return live


def fill(queue: QueueStore, count: int, *, body: bytes = b"x" * 60) -> list[int]:
    return [
        queue.append(
            enqueued_at_ms=1,
            expire_at_ms=0,
            exchange="",
            routing_key="k",
            raw_properties=b"",
            body=body,
        )
        for _ in range(count)
    ]


SEGMENT = 320  # two 98-byte records per segment, after its 80-byte header


def test_a_crash_at_every_step_of_deleting_a_fully_acked_segment(
    data_dir, crash_points, caplog
) -> None:
    store = MessageStore(data_dir, segment_size=SEGMENT)
    queue = store.open_queue("/", "q")
    ids = fill(queue, 9)  # segments 1, 2 and 3
    queue.sync()
    first_segment = [msg_id for msg_id in ids if msg_id >> 32 == ids[0] >> 32]
    assert 1 < len(first_segment) < len(ids)
    for msg_id in first_segment[:-1]:
        queue.ack(msg_id)
    queue.sync()  # an ack file for segment 1 exists from now on
    queue.ack(first_segment[-1])  # retired: unlinked at the end of the next pass

    def retire() -> None:
        queue.sync()
        queue.sync()

    crashed = crash_points(retire)
    store.close()
    assert not (queue.directory / segments.segment_name(ids[0] >> 32)).exists()
    assert len(crashed) >= 3  # the deletion took steps, and each was a crash point

    live = [msg_id for msg_id in ids if msg_id not in first_segment]
    segment_file = queue.directory.relative_to(data_dir) / segments.segment_name(ids[0] >> 32)
    for directory in crashed:
        recovered = recover_quietly(directory, caplog, segment_size=SEGMENT)
        if (directory / segment_file).exists():
            # The last ack retired the segment instead of being written: until the file is
            # gone, a crash brings that one message back (an ack never synced, as RabbitMQ).
            assert recovered in (live, sorted([first_segment[-1], *live])), directory.name
        else:
            assert recovered == live, directory.name


def test_a_crash_at_every_step_of_deleting_a_compacted_segment(
    data_dir, crash_points, caplog
) -> None:
    """A compaction original has an ack file too; its live records were copied first."""
    size = 4 * 1024
    store = MessageStore(data_dir, segment_size=size)
    queue = store.open_queue("/", "q")
    ids = fill(queue, 200)
    queue.sync()
    kept = ids[::10]
    for msg_id in ids:
        if msg_id not in kept:
            queue.ack(msg_id)

    def compact() -> None:
        for _ in range(6):  # compacts, then unlinks the originals
            queue.sync()

    crashed = crash_points(compact)
    assert queue._moved, "nothing was compacted"
    store.close()
    assert len(crashed) >= 3
    for directory in crashed:
        assert recover_quietly(directory, caplog, segment_size=size) == kept


def test_an_ack_file_without_segment_or_tombstone_is_still_damage(data_dir, caplog) -> None:
    """What a crash never leaves: a segment lost with its ack file still there."""
    store = MessageStore(data_dir, segment_size=SEGMENT)
    queue = store.open_queue("/", "q")
    ids = fill(queue, 9)
    queue.ack(ids[0])
    store.close()
    os.unlink(queue.directory / segments.segment_name(ids[0] >> 32))
    with caplog.at_level(logging.ERROR, logger="hutch_broker"):
        reopened = MessageStore(data_dir, segment_size=SEGMENT)
        survivors = [message.msg_id for message in reopened.open_queue("/", "q").recover()]
        reopened.close()
    assert survivors == [msg_id for msg_id in ids if msg_id >> 32 != ids[0] >> 32]
    assert any("segment was lost" in record.getMessage() for record in caplog.records)
    assert (data_dir / "quarantine").is_dir()


def test_segment_numbers_are_not_reused_after_an_interrupted_deletion(data_dir) -> None:
    """A tombstone's number counts as used, as an ack file's does (ids keep increasing)."""
    store = MessageStore(data_dir, segment_size=SEGMENT)
    queue = store.open_queue("/", "q")
    ids = fill(queue, 3)
    store.close()
    directory = queue.directory
    (directory / "msgs.0000009999.deleted").write_bytes(records.file_header(1, bytes(16)))
    reopened = MessageStore(data_dir, segment_size=SEGMENT)
    new_id = fill(reopened.open_queue("/", "q"), 1)[0]
    reopened.close()
    assert new_id >> 32 > 9999
    assert not (directory / "msgs.0000009999.deleted").exists()
    assert ids[0] >> 32 < 9999
