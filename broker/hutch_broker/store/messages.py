"""All durable queue logs of a broker, and the group commit that makes them durable together.

The broker confirms persistent messages once per event-loop tick, after one ``sync()`` here.
That sync flushes every dirty ``QueueStore`` and runs their fdatasyncs in parallel on a few
threads: the filesystem journal merges concurrent fsyncs, so 32 dirty files took 7 ms here
instead of 27-80 ms one after the other.

An exclusive ``flock`` on ``msgs/.lock`` keeps a second broker process (or a test that forgot
to close) from opening the same logs and corrupting them.

Start-up never deletes a log it cannot place. A log whose queue is not in the definitions (a
lost ``definitions.log`` once made start-up delete every queue's messages, silently) and a log
whose recovery fails are moved into the quarantine (``quarantine``) with an ERROR line; a queue
whose log was set aside starts empty, and every other queue starts normally.

``msgs/stopped-cleanly`` tells recovery that the last run synced and closed every log, so that a
cut tail found now is damage and not a write a crash interrupted (``recovery._cut_tail``): it
is written by ``close`` (only if no log failed, and only if every log on disk was either
recovered by this run or already clean; a run that opened no log leaves it as it was), and
removed, durably, before this run changes any log.
Without it (a crash, or a data directory written before it existed) recovery assumes a crash.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import struct
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hutch_broker.store import errors, files, layout, records, syncing
from hutch_broker.store.quarantine import Quarantine
from hutch_broker.store.queuestores import QueueStore
from hutch_broker.store.records import StoredMessage
from hutch_broker.store.syncing import SyncPass

__all__ = ["MessageStore", "QueueStore", "StoredMessage"]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_SIZE = 8 * 1024 * 1024
MIN_SEGMENT_SIZE = 64
MAX_SEGMENT_SIZE = 1 << 30  # keeps every record offset within the 32 bits of a msg_id
FSYNC_THREADS = 8
STOPPED_CLEANLY = "stopped-cleanly"


class MessageStore:
    """All durable queue logs under <data_dir>/msgs/, one directory per (vhost, queue)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        quarantine_dir: Path | None = None,
    ) -> None:
        """``quarantine_dir`` defaults to ``<data_dir>/quarantine``."""
        if not MIN_SEGMENT_SIZE <= segment_size <= MAX_SEGMENT_SIZE:
            raise ValueError(f"segment_size out of range: {segment_size}")
        self._segment_size = segment_size
        self._root = Path(data_dir) / "msgs"
        self.quarantine = Quarantine(quarantine_dir or Path(data_dir) / "quarantine")
        self._root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock_directory(self._root)
        layout.remove_incomplete(self._root)
        self._stopped_cleanly = (self._root / STOPPED_CLEANLY).exists()
        self._marker_gone = not self._stopped_cleanly
        self._opened: set[str] = set()  # directory names of the logs this run opened
        self._queues: dict[tuple[str, str], QueueStore] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="hutch-fsync")
        self._closed = False

    def open_queue(self, vhost: str, queue: str) -> QueueStore:
        """The queue's log, reopened (and recovered) or new; the same object while open.

        A new log creates its directory on its first append (see ``layout``).
        """
        with self._lock:
            self._check_open()
            store = self._queues.get((vhost, queue))
            if store is not None and not store.closed:
                return store
            self._remove_clean_stop_marker()
            self._opened.add(layout.queue_path(self._root, vhost, queue).name)
            store = self._recover(vhost, queue) or self._new_log(vhost, queue)
            self._queues[(vhost, queue)] = store
            return store

    def _recover(self, vhost: str, queue: str) -> QueueStore | None:
        """The queue's recovered log; None if it has none, or if it was set aside."""
        try:
            directory = layout.existing_queue_dir(
                self._root, vhost, queue, quarantine=self.quarantine
            )
            if directory is None:
                return None
            return QueueStore(
                directory,
                identity=records.queue_identity(vhost, queue),
                segment_size=self._segment_size,
                fsync_pool=self._pool,
                quarantine=self.quarantine,
                stopped_cleanly=self._stopped_cleanly,
            )
        except errors.UnsupportedFormatError:
            raise  # another broker version's files: refuse, do not guess
        except (errors.StoreError, OSError, ValueError, struct.error) as exc:
            self._set_aside(vhost, queue, f"its recovery failed: {exc!r}")
            return None

    def _new_log(self, vhost: str, queue: str) -> QueueStore:
        return QueueStore(
            layout.queue_path(self._root, vhost, queue),
            identity=records.queue_identity(vhost, queue),
            segment_size=self._segment_size,
            fsync_pool=self._pool,
            create=functools.partial(layout.create_queue_dir, self._root, vhost, queue),
        )

    def _set_aside(self, vhost: str, queue: str, why: str) -> None:
        path = layout.queue_path(self._root, vhost, queue)
        owner = layout.describe((vhost, queue))
        entry = self.quarantine.move(
            path, label=f"queue-{path.name}", reason=f"{path}: log of {owner}; {why}"
        )
        log.error(
            "%s: %s; its log %s was moved to %s, the queue starts empty",
            owner,
            why,
            path,
            entry,
        )

    def set_aside_unclaimed(self, claimed: Iterable[tuple[str, str]]) -> list[Path]:
        """Move every queue log that no queue in ``claimed`` (nor an open log) owns into the
        quarantine, with an ERROR line each; the quarantine entries. Start-up calls this with
        the durable queues of the recovered definitions, after opening their logs."""
        with self._lock:
            self._check_open()
            owners = set(claimed) | set(self._queues)
            kept = {layout.queue_path(self._root, vhost, queue).name for vhost, queue in owners}
            return [
                self._set_aside_unclaimed(entry)
                for entry in sorted(self._root.iterdir())
                if entry.is_dir() and "." not in entry.name and entry.name not in kept
            ]

    def _set_aside_unclaimed(self, path: Path) -> Path:
        owner = layout.describe(layout.read_names(path))
        entry = self.quarantine.move(
            path,
            label=f"queue-{path.name}",
            reason=f"{path}: log of {owner}, not a durable queue in the definitions.",
        )
        log.error(
            "%s: log of %s, which is not a durable queue in the definitions: moved to %s, "
            "not deleted",
            path,
            owner,
            entry,
        )
        return entry

    def delete_queue(self, vhost: str, queue: str) -> None:
        """Remove the queue's log, open or not; a no-op when there is none."""
        with self._lock:
            self._check_open()
            store = self._queues.pop((vhost, queue), None)
            if store is not None and not store.closed:
                store.destroy()
            else:
                files.remove_tree(layout.queue_path(self._root, vhost, queue))

    def existing_queues(self) -> list[tuple[str, str]]:
        """(vhost, queue) of every log on disk, open or not, sorted."""
        with self._lock:
            self._check_open()
            return [names for names, _ in layout.existing(self._root)]

    @property
    def dirty(self) -> bool:
        """Whether a log holds writes no sync has made durable yet: the broker's once-a-second
        lazy sync (acks, dead-lettered records) starts only then. False once closed."""
        with self._lock:
            return any(store.dirty for store in self._queues.values())

    def sync(self) -> None:
        """Group commit: make every dirty log durable in one pass; safe from a worker thread.

        The event loop keeps appending and acking while this runs. Dead-lettering moves a
        message: it appends the copy to one log, then acks the original in another. So that
        ``kill -9`` (which keeps what reached the kernel) can never leave the ack without the
        copy, and neither can a power cut (the page cache writes files back in any order), the
        pass works in phases over all logs:

        1. take every dirty log's buffered acks (``begin_sync``); a segment is unlinked only
           by a pass that began after it was retired;
        2. write every log's buffered records, looking at the logs again: each copy whose
           original's ack was taken in 1 was appended before that ack, so it is written now,
           even into a log that was clean (or not open) when 1 began; fdatasync them;
        3. only then write the acks taken in 1 and fdatasync them (a second round: about
           0.2 ms on an SSD, and none when the pass took no ack), and unlink.

        A crash in between leaves a moved message in both queues at worst (at-least-once).
        """
        with self._lock:
            self._check_open()
            dirty = [store for store in self._queues.values() if store.dirty]
        passes: dict[QueueStore, SyncPass] = {}
        written = False
        try:
            for store in dirty:
                sync_pass = store.begin_sync()
                if sync_pass is not None:
                    passes[store] = sync_pass
            with self._lock:
                stores = list(self._queues.values())
            for store in stores:
                if store not in passes and store.dirty:
                    sync_pass = store.begin_sync(acks=False)
                    if sync_pass is None:
                        continue
                    passes[store] = sync_pass
                if store in passes:
                    store.write_records(passes[store])
            written = syncing.commit(list(passes.items()), self._pool)
        finally:
            syncing.end_all(list(passes.items()), finish=written)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            stores = list(self._queues.values())
            self._queues.clear()
        try:
            for store in stores:
                store.close()
            self._note_clean_stop(stores)
        finally:
            self._pool.shutdown()
            os.close(self._lock_fd)

    def _remove_clean_stop_marker(self) -> None:
        """Before this run changes a log (recovery included): from now on, until ``close``,
        a crash may interrupt a write."""
        if self._marker_gone:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._root / STOPPED_CLEANLY)
        files.fsync_dir(self._root)
        self._marker_gone = True

    def _note_clean_stop(self, stores: list[QueueStore]) -> None:
        """Every log closed after its final sync: say so for the next start-up, unless a log
        failed, or a log this run never opened may still hold a tail a crash left. A run that
        opened no log changed none and leaves the marker as it found it (a refused start-up
        changes nothing)."""
        if not self._opened or any(store.failed for store in stores):
            return
        on_disk = {e.name for e in self._root.iterdir() if e.is_dir() and "." not in e.name}
        if not self._stopped_cleanly and not on_disk <= self._opened:
            return
        files.write_atomically(self._root / STOPPED_CLEANLY, b"every queue log synced and closed\n")

    def _check_open(self) -> None:
        if self._closed:
            raise errors.StoreClosedError(f"{self._root}: closed")


def _lock_directory(root: Path) -> int:
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise errors.StoreLockedError(f"{root} is in use by another process") from exc
    return fd
