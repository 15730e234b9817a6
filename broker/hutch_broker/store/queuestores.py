"""The durable log of one durable queue: append, ack, recover, and a sync that can run elsewhere.

Modelled on LavinMQ's message store: append-only segment files ``msgs.N`` with one ack file
``acks.N`` each; a msg_id is ``(segment number << 32) | offset``, so a read needs no index and
ids keep increasing across restarts (a reopened log always writes to a new segment number, and
the highest-numbered segment is never deleted outside ``destroy``). A segment is deleted once
every record in it is acked; ``compaction`` bounds the disk use when acks leave holes.

Durability contract: ``append`` and ``ack`` only buffer; ``sync`` hands the buffers to the
kernel, fdatasyncs every touched file (and the directory when a segment was created, and, after
the first append of a new log, the directory ``layout.create_queue_dir`` made), and only then
returns. The broker confirms a persistent message after the ``sync`` that followed its
``append``, so ``kill -9`` (which loses userspace buffers, not the page cache) or a power cut can
only lose what was never confirmed. Fully acked segments are unlinked at the end of a sync
(so compaction copies are durable before their originals disappear), and the next sync fsyncs
the directory; until then a power cut may bring such a segment back, which is a redelivery of
acked messages, never a loss.

Threading: the event loop calls ``append``/``ack``/``read``; a worker thread may call ``sync``
at the same time. ``_lock`` guards the in-memory state and is held only for buffer work (a
``pwrite`` at most); fsyncs run outside it under ``_sync_lock``, which also serializes syncs,
``close`` and ``destroy``. Only sync-side code ever closes a write or ack descriptor, so a
worker never fsyncs a descriptor the event loop has recycled. After a failed write or fsync the
log refuses further work (the page cache may have dropped the data, so a later fsync proving
nothing must not be trusted to confirm anything).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from pathlib import Path

from hutch_broker.store import (
    compaction,
    errors,
    files,
    records,
    recovery,
    segments,
    syncing,
)
from hutch_broker.store.quarantine import Quarantine
from hutch_broker.store.records import IndexedMessage, RunRecord, StoredMessage
from hutch_broker.store.segments import Segment
from hutch_broker.store.syncing import SyncPass

log = logging.getLogger(__name__)

MAX_READ_FDS = 8
_MAX_STAMP = (1 << 64) - 1


class QueueStore:
    """The durable log of one durable queue, in its own directory."""

    def __init__(
        self,
        directory: Path,
        *,
        identity: bytes,
        segment_size: int,
        fsync_pool: Executor | None = None,
        create: Callable[[], list[Path]] | None = None,
        quarantine: Quarantine | None = None,
        stopped_cleanly: bool = False,
    ) -> None:
        """Recover the log in ``directory``, setting aside what cannot be used in
        ``quarantine``; or, given ``create``, start a new log whose directory does not exist
        yet: the first append calls ``create`` to make it, and the next sync fsyncs the paths
        it returns.

        ``identity`` (``records.queue_identity``) goes into every segment written, and a
        segment carrying another is set aside; ``stopped_cleanly`` says the last run closed
        this log after syncing all of it (``MessageStore``), so a cut tail is damage.
        """
        self._directory = directory
        self._identity = identity
        self._segment_size = segment_size
        self._fsync_pool = fsync_pool
        self._lock = threading.Lock()
        self._sync_lock = threading.RLock()
        self._create = create
        self._unsynced_paths: list[Path] = []
        if create is None:
            if quarantine is None:
                raise ValueError("recovering a log needs a quarantine")
            recovered = recovery.recover_directory(
                directory,
                quarantine=quarantine,
                identity=identity,
                stopped_cleanly=stopped_cleanly,
            )
        else:
            recovered = recovery.RecoveredLog(segments={}, moved={}, messages=[], next_number=1)
        self._segments = recovered.segments
        self._moved = recovered.moved  # msg_id -> position of the copy compaction made
        self._recovered: list[IndexedMessage] | None = recovered.messages
        self._acked_since_open = False  # recover() needs to filter only if something was
        self._next_number = recovered.next_number
        self._sync_gen = 0
        self._dirty: set[Segment] = set()
        self._retiring: list[Segment] = []
        self._read_fds: OrderedDict[int, int] = OrderedDict()
        self._ack_files_open: set[Segment] = set()
        self._dir_dirty = False
        self._acked_since_check = 0
        self._closed = False
        self._failure: BaseException | None = None
        # The last append's exchange and routing key, as given and encoded: a publisher
        # repeats them, and encoding both per message was two calls of the append's fifteen.
        self._names: tuple[str, str, bytes, bytes] = ("", "", b"", b"")
        self._write: Segment | None = None if create else self._new_segment()
        for segment in list(self._segments.values()):
            if segment.ack_pending:
                self._dirty.add(segment)
            if not segment.live and segment is not self._write:
                self._retire(segment)

    # -- the event-loop side ------------------------------------------------------------

    def append(
        self,
        *,
        enqueued_at_ms: int,
        expire_at_ms: int,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
    ) -> int:
        """Buffer a record (no syscall unless the buffer is full); returns its msg_id.

        Runs once per persistent message on the event loop, so the checks that always pass
        are read inline (the timestamps' bound is written only here) and call out only to
        raise.
        """
        if not (0 <= enqueued_at_ms <= _MAX_STAMP and 0 <= expire_at_ms <= _MAX_STAMP):
            raise ValueError(
                f"timestamps must be 0 to {_MAX_STAMP} ms (u64): "
                f"enqueued_at_ms={enqueued_at_ms}, expire_at_ms={expire_at_ms}"
            )
        names = self._names
        if exchange == names[0] and routing_key == names[1]:
            exchange_bytes, key_bytes = names[2], names[3]
        else:
            exchange_bytes = records.encode_name(exchange, what="exchange name")
            key_bytes = records.encode_name(routing_key, what="routing key")
            self._names = (exchange, routing_key, exchange_bytes, key_bytes)
        length = records.record_size(
            exchange=exchange_bytes,
            routing_key=key_bytes,
            raw_properties=raw_properties,
            body=body,
        )
        if length - records.HEADER_SIZE > records.MAX_PAYLOAD:
            raise ValueError(f"message too large for one record: {length} bytes")
        with self._lock:
            if self._closed or self._failure is not None:
                self._check_usable()
            segment = self._segment_for(length)
            offset = segment.size
            msg_id = records.msg_id_of(segment.number, offset)
            head = records.encode_head(
                seed=records.record_seed(segment.salt, offset),
                msg_id=msg_id,
                enqueued_at_ms=enqueued_at_ms,
                expire_at_ms=expire_at_ms,
                exchange=exchange_bytes,
                routing_key=key_bytes,
                raw_properties=raw_properties,
                body=body,
            )
            self._write_record(segment, offset, length, head, body)
            return msg_id

    def ack(self, msg_id: int) -> None:
        """The message is gone for good; unknown or already acked ids are ignored."""
        with self._lock:
            if self._closed or self._failure is not None:  # per acked message: inline
                self._check_usable()
            self._ack(msg_id)

    def ack_many(self, msg_ids: Iterable[int]) -> None:
        with self._lock:
            self._check_usable()
            for msg_id in msg_ids:
                self._ack(msg_id)

    def purge(self) -> None:
        """Drop every message; the segment files go at the end of the next sync."""
        with self._lock:
            self._check_usable()
            if self._write is not None and self._write.live:
                self._rotate()
            for segment in list(self._segments.values()):
                if segment is not self._write and not segment.retire_gen:
                    self._retire(segment)
            self._moved.clear()
            self._acked_since_open = True

    # -- for stream queues (model/streams.py): the log is kept, and dropped by whole segments --

    def rotate(self) -> None:
        """Seal the write segment now (it holds records): the next append starts a new one.

        A stream's ``x-stream-max-segment-size-bytes`` below the store's segment size."""
        with self._lock:
            self._check_usable()
            if self._write is not None and self._write.size > self._write.data_start:
                self._rotate()

    def drop_segment(self, number: int) -> bool:
        """Ack every record of sealed segment ``number`` (a stream's retention); False if it is
        unknown, already going, or the write segment (never dropped)."""
        with self._lock:
            self._check_usable()
            segment = self._segments.get(number)
            if segment is None or segment.retire_gen or segment is self._write:
                return False
            for offset in list(segment.live):
                self._ack(records.msg_id_of(number, offset))
            return True

    def recover(self) -> list[IndexedMessage]:
        """Every un-acked message found at open, in append order, without its body (``read``
        brings that back); call once, after opening."""
        with self._lock:
            self._check_usable()
            if self._recovered is None:
                raise errors.StoreError("recover() was already called")
            found, self._recovered = self._recovered, None
            if not self._acked_since_open:
                return found
            return [message for message in found if self._is_live(message.msg_id)]

    def read(self, msg_id: int) -> StoredMessage:
        """Read a live message back from disk (or from the write buffer)."""
        with self._lock:
            self._check_usable()
            segment, offset = self._locate(msg_id)
            length = segment.live[offset]
            blob = segment.read_pending(offset, length)
            if blob is None:
                blob = self._pread(segment, offset, length)
        message = records.decode_record(blob, 0, seed=segment.seed(offset))
        if message is None or message.msg_id != msg_id:
            raise errors.CorruptRecordError(f"{self._directory}: record {msg_id:#x} is corrupt")
        return message

    def read_run(self, msg_id: int, max_bytes: int) -> list[RunRecord]:
        """The live record ``msg_id`` and the live records right after it in its segment, each
        with its length on disk: one ``pread`` of about ``max_bytes`` for many records.

        Why: a stream reads its log front to back, and one ``pread`` per record was a third of
        the broker's CPU per delivered message. Stops before a record that is not live, not yet
        handed to the kernel, not whole in the chunk read, or does not check out; the first one
        is read as ``read`` does (always returned, or an error raised as ``read`` raises)."""
        with self._lock:
            self._check_usable()
            segment, offset = self._locate(msg_id)
            length = segment.live[offset]
            chunk = b""
            if self._moved or offset + length > segment.flushed:
                lengths = []  # in the write buffer, or compaction renumbered: one by one
            else:
                end = offset + min(max(max_bytes, length), segment.flushed - offset)
                lengths = _run_lengths(segment.live, offset, end)
                chunk = self._pread(segment, offset, sum(lengths))
        if not lengths or len(chunk) < length:
            return [records.run_record(self.read(msg_id), length)]
        found = records.decode_run(chunk, msg_id, lengths, salt=segment.salt, offset=offset)
        if not found:
            raise errors.CorruptRecordError(f"{self._directory}: record {msg_id:#x} is corrupt")
        return found

    @property
    def dirty(self) -> bool:
        """True while appends, acks or segment deletions await a sync().

        A sync that unlinked segments leaves it true for one more (cheap) pass, which fsyncs
        the directory.
        """
        return bool(self._dirty or self._retiring or self._dir_dirty or self._unsynced_paths)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failed(self) -> bool:
        """A write or fsync failed: what is on disk may lag what was appended."""
        return self._failure is not None

    @property
    def directory(self) -> Path:
        return self._directory

    # -- the sync side (any thread) -----------------------------------------------------

    def sync(self) -> None:
        """Make everything appended or acked before this call durable."""
        sync_pass = self.begin_sync()
        if sync_pass is None:
            return
        written = False
        try:
            self.write_records(sync_pass)
            written = syncing.commit([(self, sync_pass)], self._fsync_pool)
        finally:
            syncing.end_all([(self, sync_pass)], finish=written)

    def begin_sync(self, *, acks: bool = True) -> SyncPass | None:
        """Start a pass; holds ``_sync_lock`` until end_sync. None (lock not held) when closed.

        With ``acks`` (the normal case) the pass takes the acks buffered now, and it unlinks
        the segments retired before now. Without, it only writes records: a group commit gives
        such a pass to a log that became dirty after it took every other log's acks
        (``MessageStore.sync``), as its acks and retirements must wait for the next pass.
        """
        self._sync_lock.acquire()
        try:
            with self._lock:
                if self._closed:
                    self._sync_lock.release()
                    return None
                self._check_usable()
                ack_data: list[tuple[Segment, bytearray]] = []
                if acks:
                    self._sync_gen += 1
                    # Taken now: a later drop() must not discard them.
                    ack_data = [
                        (segment, segment.take_acks())
                        for segment in self._dirty
                        if segment.ack_pending
                    ]
                return SyncPass(
                    gen=self._sync_gen, fds=[], paths=[], flushed=[], acked=[], ack_data=ack_data
                )
        except BaseException:
            self._sync_lock.release()
            raise

    def write_records(self, sync_pass: SyncPass) -> None:
        """Hand every buffered record to the kernel; note what to fsync (``_sync_lock`` held).

        Every record buffered now is written, including those appended after ``begin_sync``.
        """
        with self._lock:
            # Oldest first, as in ``_rotate``: a crash tears only the newest segment written.
            sync_pass.flushed = sorted(self._dirty, key=lambda segment: segment.number)
            paths = self._unsynced_paths + ([self._directory] if self._dir_dirty else [])
            sync_pass.paths = list(dict.fromkeys(paths))
            self._flush(sync_pass)
            self._dir_dirty = False
            self._unsynced_paths = []

    def end_sync(self, sync_pass: SyncPass, *, finish: bool = True) -> None:
        """Unlink what this pass made safe to unlink, compact if due, release ``_sync_lock``.

        ``finish=False``: another log's fsync failed in the same group commit, so a copy this
        log's retired segments rely on may not be durable: unlink and compact nothing.
        """
        try:
            if sync_pass.error is not None:
                self._fail(sync_pass.error)
                raise errors.StoreError(f"{self._directory}: fsync failed") from sync_pass.error
            if finish:
                self._finish_pass(sync_pass)
                self._maybe_compact()
        finally:
            self._sync_lock.release()

    def close(self) -> None:
        """Sync, then release every descriptor; further calls raise StoreClosedError."""
        with self._sync_lock:
            if self._closed:
                return
            try:
                if self._failure is None:
                    self.sync()
                    if self._retiring:  # compaction originals whose copies the first pass synced
                        self.sync()
            finally:
                self._shut()

    def destroy(self) -> None:
        """The queue was deleted: drop everything, directory included."""
        with self._sync_lock:
            self._shut()
            files.remove_tree(self._directory)

    # -- internals (called with _lock held unless noted) -----------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise errors.StoreClosedError(f"{self._directory}: closed")
        if self._failure is not None:
            raise errors.StoreError(f"{self._directory}: unusable after an I/O error")

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self._failure = exc
        log.error("%s: I/O error, the queue log stops here: %s", self._directory, exc)

    def _new_segment(self) -> Segment:
        segment = Segment.create(self._directory, self._next_number, identity=self._identity)
        self._next_number += 1
        self._segments[segment.number] = segment
        self._dirty.add(segment)
        self._dir_dirty = True
        return segment

    def _segment_for(self, length: int) -> Segment:
        """The write segment, rotated first if the record would overflow a non-empty one."""
        segment = self._write
        if segment is None:
            return self._first_segment()
        if segment.size > segment.data_start and segment.size + length > self._segment_size:
            return self._rotate()
        return segment

    def _first_segment(self) -> Segment:
        """A new log's first append: its directory, then its first segment."""
        if self._create is not None:
            try:
                self._unsynced_paths = self._create()
            except OSError as exc:
                self._failure = exc
                raise errors.StoreError(f"{self._directory}: cannot create") from exc
            self._create = None
        self._write = self._new_segment()
        return self._write

    def _rotate(self) -> Segment:
        """Seal the write segment and start the next one.

        The old segment's buffered bytes reach the kernel first, so that no byte of a newer
        segment is ever written before every byte of an older one: a ``kill -9`` then tears
        only the newest segment holding records, which is where recovery expects a torn write
        (``recovery``); a torn tail anywhere else stays a sign of damage.
        """
        old = self._write
        if old is not None:
            try:
                old.flush()
            except OSError as exc:
                self._failure = exc
                raise errors.StoreError(f"{self._directory}: write failed") from exc
        self._write = new = self._new_segment()
        if old is not None:
            old.sealed = True
            if not old.live:
                self._retire(old)
        return new

    def _write_record(self, segment: Segment, offset: int, length: int, *chunks: bytes) -> None:
        segment.add_record(offset, length)
        self._dirty.add(segment)
        try:
            segment.write(*chunks)
        except OSError as exc:
            self._failure = exc
            raise errors.StoreError(f"{self._directory}: write failed") from exc

    def _ack(self, msg_id: int) -> None:
        position = self._moved.pop(msg_id, msg_id)
        number, offset = records.split_msg_id(position)
        segment = self._segments.get(number)
        if segment is None or segment.retire_gen:
            return
        length = segment.ack(offset)
        if length is None:
            return
        self._acked_since_check += length
        self._acked_since_open = True
        if segment.live or not segment.sealed:
            self._dirty.add(segment)
        else:
            self._retire(segment)

    def _retire(self, segment: Segment) -> None:
        """Schedule an unlink for the end of the next sync pass that starts from now on."""
        segment.drop()
        segment.retire_gen = self._sync_gen + 1
        self._retiring.append(segment)
        self._dirty.discard(segment)

    def _is_live(self, msg_id: int) -> bool:
        number, offset = records.split_msg_id(self._moved.get(msg_id, msg_id))
        segment = self._segments.get(number)
        return segment is not None and offset in segment.live

    def _locate(self, msg_id: int) -> tuple[Segment, int]:
        number, offset = records.split_msg_id(self._moved.get(msg_id, msg_id))
        segment = self._segments.get(number)
        if segment is None or offset not in segment.live:
            raise errors.MessageNotFoundError(f"{self._directory}: no live message {msg_id:#x}")
        return segment, offset

    def _pread(self, segment: Segment, offset: int, length: int) -> bytes:
        fd = self._read_fds.get(segment.number)
        if fd is None:
            fd = os.open(segment.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            self._read_fds[segment.number] = fd
            if len(self._read_fds) > MAX_READ_FDS:
                os.close(self._read_fds.popitem(last=False)[1])
        else:
            self._read_fds.move_to_end(segment.number)
        return os.pread(fd, length, offset)

    def _close_read_fd(self, number: int) -> None:
        fd = self._read_fds.pop(number, None)
        if fd is not None:
            os.close(fd)

    def _flush(self, sync_pass: SyncPass) -> None:
        """Write out the records of the pass's segments; note the descriptors to fdatasync.

        A segment keeps its place in ``_dirty`` while it holds acks no pass has taken yet.
        """
        try:
            for segment in sync_pass.flushed:
                segment.flush()
                if segment.unsynced:
                    sync_pass.fds.append(segment.fd)
                    segment.unsynced = False
        except OSError as exc:
            self._failure = exc
            raise errors.StoreError(f"{self._directory}: write failed") from exc
        self._dirty = {segment for segment in self._dirty if segment.ack_pending}

    def write_acks(self, sync_pass: SyncPass) -> None:
        """Write out the acks the pass took, once every log's records are durable.

        A message moved from one queue to another (dead-lettering) is an append in one log
        and an ack in another, made in that order by the event loop. An ack may reach the
        kernel only once its copy is on disk, or a crash (``kill -9``, or a power cut, as the
        page cache writes files back in any order) could keep the ack and lose the copy: see
        ``MessageStore.sync`` for how a group commit guarantees that.
        """
        with self._lock:
            try:
                for segment, data in sync_pass.ack_data:
                    segment.write_acks(data)
                    sync_pass.ack_fds.append(segment.ack_fd)
                    sync_pass.acked.append(segment)
            except OSError as exc:
                self._failure = exc
                raise errors.StoreError(f"{self._directory}: write failed") from exc

    def _finish_pass(self, sync_pass: SyncPass) -> None:
        """After a successful pass: unlink what it made safe to unlink, close idle files.

        Done under ``_lock`` although it is I/O: these syscalls take microseconds, and the
        event loop waiting on the lock gives the GIL straight back (see ``syncing``).
        """
        gen = sync_pass.gen
        with self._lock:
            due = [segment for segment in self._retiring if segment.retire_gen <= gen]
            self._retiring = [segment for segment in self._retiring if segment.retire_gen > gen]
            for segment in due:
                self._segments.pop(segment.number, None)
                self._close_read_fd(segment.number)
                self._ack_files_open.discard(segment)
                segment.unlink()
            if due:
                self._dir_dirty = True  # the next pass makes the unlinks survive a power cut
            self._close_idle_files(sync_pass)

    def _close_idle_files(self, sync_pass: SyncPass) -> None:
        """Sealed, synced segments are done; ack files stay open while acks keep coming."""
        for segment in sync_pass.flushed:
            if segment.sealed and not segment.retire_gen and segment not in self._dirty:
                segment.close_write_fd()
        acked = {segment for segment in sync_pass.acked if not segment.retire_gen}
        for segment in self._ack_files_open - acked - self._dirty:
            segment.close_ack_fd()
        self._ack_files_open = acked | (self._ack_files_open & self._dirty)

    def _maybe_compact(self) -> None:
        """Sync side: copy the live records out of sparse segments (see ``compaction``)."""
        with self._lock:
            if self._closed or self._acked_since_check < self._segment_size:
                return  # garbage only grows through acks: no need to look at every sync
            chosen = compaction.pick(self._segments.values(), segment_size=self._segment_size)
            if not chosen:
                self._acked_since_check = 0  # else look again next sync: one pass is bounded
            numbers = [segment.number for segment in chosen]
        for number in numbers:  # sealed and flushed, and only this (sync) side unlinks them
            try:
                data = (self._directory / segments.segment_name(number)).read_bytes()
            except OSError as exc:  # everything is durable already: compaction can wait
                log.error("%s: compaction skipped: %s", self._directory, exc)
                return
            with self._lock:
                self._relocate(number, data)

    def _relocate(self, number: int, data: bytes) -> None:
        segment = self._segments.get(number)
        if segment is None or segment.retire_gen or self._closed:
            return
        copies: list[tuple[int, bytes]] = []
        for offset, length in sorted(segment.live.items()):
            msg_id = records.checked_msg_id(data, offset, seed=segment.seed(offset))
            if msg_id is None or records.framed_length(data, offset) != length:
                log.error("%s: corrupt record at %d, segment not compacted", segment.path, offset)
                return
            copies.append((msg_id, data[offset : offset + length]))
        for msg_id, raw in copies:
            target = self._segment_for(len(raw))
            offset = target.size
            self._write_record(target, offset, len(raw), records.reseal(raw, target.seed(offset)))
            self._moved[msg_id] = records.msg_id_of(target.number, offset)
        self._retire(segment)
        log.info("%s: compacted, %d live records copied", segment.path, len(copies))

    def _shut(self) -> None:
        """Close every descriptor and mark the log closed (sync side)."""
        with self._lock:
            for segment in self._segments.values():
                segment.close_files()
            for segment in self._retiring:
                segment.close_files()
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
            self._closed = True


def _run_lengths(live: dict[int, int], offset: int, end: int) -> list[int]:
    """The lengths of the live records laid end to end from ``offset`` (which is live) that fit
    before ``end``, the first one always."""
    length = live[offset]
    lengths = [length]
    at = offset + length
    while True:
        length = live.get(at, 0)
        if not length or at + length > end:
            return lengths
        lengths.append(length)
        at += length
