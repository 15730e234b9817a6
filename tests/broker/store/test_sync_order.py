"""A group commit never lets a moved message's ack reach the disk before its copy.

Dead-lettering moves a message: an append in the dead-letter queue's log, then an ack in the
source's. If the ack could reach the kernel before the copy, ``kill -9`` between them would
lose the message from both queues; if it could reach the kernel before the copy is
fdatasynced, a power cut could. The first test checks the syscalls' order whatever the queues'
order; the last tries the move at every point of a sync running beside the event loop, as it
does in the broker, where the torture suite found a loss that the first could not see.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hutch_broker.store import MessageStore, QueueStore, errors, files, records, segments, syncing

FIELDS: dict[str, Any] = {
    "enqueued_at_ms": 1,
    "expire_at_ms": 0,
    "exchange": "",
    "raw_properties": b"",
}


@pytest.mark.parametrize("order", [("source", "dead"), ("dead", "source")])
def test_every_append_is_on_disk_before_any_ack_reaches_the_kernel(tmp_path, monkeypatch, order):
    """kill -9 keeps what reached the kernel; a power cut keeps what was fdatasynced, and the
    page cache writes back files in any order. So no ack may be written before the pass's
    records are fdatasynced, not just written."""
    store = MessageStore(tmp_path, segment_size=1 << 20)
    logs = {name: store.open_queue("/", name) for name in order}
    moved = logs["source"].append(routing_key="k", body=b"payload", **FIELDS)
    store.sync()
    calls: list[tuple[str, int]] = []
    pwrite_all, write_view, fdatasync = segments._pwrite_all, files.write_view, syncing._fdatasync

    def record(fd, *args):
        calls.append(("append", fd))
        pwrite_all(fd, *args)

    def ack(fd, data, at=None):
        if at is None:  # appended: an ack file (a record is written at its offset)
            calls.append(("ack", fd))
        write_view(fd, data, at)

    def sync(fd):
        fdatasync(fd)
        calls.append(("synced", fd))

    monkeypatch.setattr(segments, "_pwrite_all", record)
    monkeypatch.setattr(files, "write_view", ack)
    monkeypatch.setattr(syncing, "_fdatasync", sync)
    logs["source"].ack(moved)  # dead-lettered: gone from the source ...
    logs["dead"].append(
        routing_key="k", body=b"payload", **FIELDS
    )  # ... into the dead-letter queue
    store.sync()
    store.close()
    [(_, copy_fd)] = [call for call in calls if call[0] == "append"]
    [(_, ack_fd)] = [call for call in calls if call[0] == "ack"]
    assert calls.index(("synced", copy_fd)) < calls.index(("ack", ack_fd)), calls
    assert ("synced", ack_fd) in calls  # and the ack is made durable in the same pass


def test_an_ack_made_before_a_sync_survives_its_segment_retiring_during_the_sync(tmp_path):
    """Acks buffered when a pass begins belong to that pass, whatever happens meanwhile.

    Found by the kill -9 test under load: an ack made before a sync began, then the last live
    record of the same sealed segment acked while the sync ran (retiring the segment, whose
    file is only unlinked after the next pass), and the first ack was dropped with the
    segment's buffers instead of being written: a confirmed ack undone by a crash.
    """
    store = MessageStore(tmp_path, segment_size=256)
    log = store.open_queue("/", "q")
    first, second = (log.append(routing_key="k", body=b"x" * 60, **FIELDS) for _ in range(2))
    for _ in range(4):  # fills the segment: first and second sit in a sealed one
        log.append(routing_key="k", body=b"y" * 60, **FIELDS)
    store.sync()
    log.ack(first)  # acked, and confirmed by the sync that starts next
    sync_pass = log.begin_sync()
    assert sync_pass is not None
    log.ack(second)  # meanwhile: the segment's last live record goes, the segment retires
    log.write_records(sync_pass)
    assert syncing.commit([(log, sync_pass)])
    log.end_sync(sync_pass)
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "msgs", crashed / "msgs")  # kill -9 now
    store.close()
    recovered = MessageStore(crashed).open_queue("/", "q")
    assert first not in [message.msg_id for message in recovered.recover()]


class _EventLoopBetween:
    """Runs ``step`` just before the sync's ``point``-th lock acquisition or ``dirty`` read.

    A sync runs in a worker thread while the event loop keeps appending and acking. What the
    sync does under a lock is atomic for the event loop, so the event loop's work lands between
    two of those sections or between a section and a read of a log's unlocked ``dirty`` flag.
    Trying ``step`` before each of them in turn tries every interleaving the real threads can
    produce.
    """

    def __init__(self, point: int, step: Callable[[], None]) -> None:
        self.point = point
        self.step = step
        self.seen = 0
        self.armed = False
        self.ran = False
        self.held = 0

    def wrap(self, lock: Any, *, shared: bool = True) -> Any:
        """``lock`` with the gate in front; ``shared``: the event loop takes it too."""
        gate = self

        class Gated:
            def __enter__(self) -> None:
                self.acquire()

            def __exit__(self, *exc: object) -> None:
                self.release()

            def acquire(self, *args: Any) -> bool:
                gate.reached()
                got = bool(lock.acquire(*args))
                gate.held += shared and got
                return got

            def release(self) -> None:
                gate.held -= shared
                lock.release()

        return Gated()

    def reached(self) -> None:
        if not self.armed or self.held:  # the event loop waits while the sync holds a lock
            return
        self.seen += 1
        if self.seen == self.point:
            self.armed = False  # the step's own lock sections are the event loop's
            self.step()
            self.ran = True
            self.armed = True


@pytest.mark.parametrize("retires", [False, True], ids=["ack", "last-live-record"])
@pytest.mark.parametrize("source_log", ["clean", "dirty"])
@pytest.mark.parametrize("dead_log", ["unopened", "clean", "dirty"])
@pytest.mark.parametrize("order", [("source", "dead"), ("dead", "source")])
def test_a_message_dead_lettered_while_a_sync_runs_is_in_one_queue_after_kill_9(
    tmp_path, monkeypatch, order, dead_log, source_log, retires
):
    """The move (append into the dead-letter log, then ack in the source) at every point of a
    running group commit; then ``kill -9`` (the files as the kernel has them): the message is
    in the source or in the dead-letter queue, never in neither.

    Found by the torture suite (6 of a cycle's confirmed ``nack`` messages lost): the old pass
    took each log's records and acks together, log by log, while the event loop went on, so it
    could take the source's ack after it had already written the dead-letter log.
    """
    point = 1
    while _dead_letter_during_a_sync(
        tmp_path / str(point), monkeypatch, point, order, dead_log, source_log, retires
    ):
        point += 1
    assert point > 3  # the move ran at two points of the sync at least


def _dead_letter_during_a_sync(
    work: Path,
    monkeypatch: pytest.MonkeyPatch,
    point: int,
    order: tuple[str, str],
    dead_log: str,
    source_log: str,
    retires: bool,
) -> bool:
    """One interleaving: the move before the sync's ``point``-th step. False: no such step."""
    size = 120 if retires else 40  # one record per 320-byte segment, or several
    store = MessageStore(work, segment_size=320)
    logs = {name: store.open_queue("/", name) for name in order if name != "dead"}
    if dead_log != "unopened":
        logs["dead"] = store.open_queue("/", "dead")
    moved = logs["source"].append(routing_key="k", body=b"moved".ljust(size), **FIELDS)
    # Retiring: ``moved`` alone in a sealed segment, which its ack retires; else it shares the
    # segment with a message that stays.
    logs["source"].append(routing_key="k", body=b"other".ljust(size), **FIELDS)
    store.sync()  # ``moved`` is confirmed
    if source_log == "dirty":
        logs["source"].append(routing_key="k", body=b"later".ljust(size), **FIELDS)
    if dead_log == "dirty":
        logs["dead"].append(routing_key="k", body=b"earlier".ljust(size), **FIELDS)

    def dead_letter() -> None:
        if "dead" not in logs:  # the first message the dead-letter queue's log sees
            logs["dead"] = store.open_queue("/", "dead")
        logs["dead"].append(routing_key="k", body=b"moved-copy".ljust(size), **FIELDS)
        logs["source"].ack(moved)

    gate = _EventLoopBetween(point, dead_letter)
    store._lock = gate.wrap(store._lock)
    for log in logs.values():
        log._lock = gate.wrap(log._lock)
        log._sync_lock = gate.wrap(log._sync_lock, shared=False)
    dirty = QueueStore.dirty.fget
    with monkeypatch.context() as patch:
        patch.setattr(QueueStore, "dirty", property(lambda log: gate.reached() or dirty(log)))
        gate.armed = True
        store.sync()
        gate.armed = False
    if not gate.ran:
        store.close()
        return False
    crashed = work / "crashed"
    shutil.copytree(work / "msgs", crashed / "msgs")  # kill -9 now
    store.close()
    segment_file = segments.segment_name(records.split_msg_id(moved)[0])
    assert (logs["source"].directory / segment_file).exists() != retires
    recovered = MessageStore(crashed)
    bodies = {name: served_bodies(recovered.open_queue("/", name)) for name in order}
    recovered.close()
    assert b"moved" in bodies["source"] or b"moved-copy" in bodies["dead"], (
        f"lost when the dead-lettering ran before step {point} of the sync: {bodies}"
    )
    return True


@pytest.mark.parametrize("retires", [False, True], ids=["ack", "last-live-record"])
def test_when_the_copys_fsync_fails_the_source_writes_no_ack_and_unlinks_nothing(
    tmp_path, monkeypatch, retires
):
    """A failed fdatasync may have lost the copy (the kernel can drop the dirty pages), so the
    original's ack must not be written, nor the segment it retired unlinked; the broker then
    stops and recovers from what is on disk."""
    store = MessageStore(tmp_path, segment_size=256 if retires else 1 << 20)
    source, dead = store.open_queue("/", "source"), store.open_queue("/", "dead")
    moved = source.append(routing_key="k", body=b"moved".ljust(120), **FIELDS)
    # With small segments, other seals moved's segment, which the ack then retires.
    source.append(routing_key="k", body=b"other".ljust(120), **FIELDS)
    store.sync()
    segment_file = source.directory / segments.segment_name(records.split_msg_id(moved)[0])
    dead.append(routing_key="k", body=b"moved-copy".ljust(120), **FIELDS)
    source.ack(moved)
    fdatasync = syncing._fdatasync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(dead.directory)):
            raise OSError(errno.EIO, "Input/output error")
        fdatasync(fd)

    monkeypatch.setattr(syncing, "_fdatasync", failing)
    with pytest.raises(errors.StoreError, match="fsync failed"):
        store.sync()
    assert segment_file.exists()
    assert not list(source.directory.glob("acks.*"))
    monkeypatch.undo()
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "msgs", crashed / "msgs")  # the broker stops here
    store.close()
    recovered = MessageStore(crashed)
    bodies = served_bodies(recovered.open_queue("/", "source"))
    recovered.close()
    assert b"moved" in bodies


def served_bodies(queue):
    """The bodies a recovered log serves: recovery keeps none, a queue reads each back."""
    return [queue.read(message.msg_id).body.rstrip() for message in queue.recover()]
