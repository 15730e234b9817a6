"""One segment file and its ack file, as a queue log sees them in memory.

Appends land in a userspace buffer (``pending``) and reach the kernel with one write per sync
(or when the buffer grows past ``FLUSH_THRESHOLD``): a per-append syscall would cost more than
encoding the record. Losing that buffer to ``kill -9`` only loses records nobody was told
about, because the broker confirms a persistent message only after ``sync()`` returned.

The buffer keeps each append's chunks (a record's head and its body, immutable ``bytes``) by
reference, not copied into one ``bytearray``: a bytearray grows by an eighth at a time and was
emptied after every flush, and at the few hundred KiB a group commit buffers under confirms
(scenario 2 of the bench) its regrowth cost about 0.5 µs a 1 KiB record, ten times the copy.
A flush of small chunks joins them into one buffer of exactly its size (one copy, no regrowth)
for one ``pwrite``, which costs less than ``pwritev`` taking each chunk; large chunks go to
``pwritev`` by reference (``JOIN_CHUNKS_UP_TO``).

Acks are buffered the same way and appended to the ack file with ``O_APPEND``. The live records
are kept as offset -> length: a double ack or a stale id becomes a no-op instead of a premature
segment deletion, and compaction knows exactly how many live bytes a segment holds.

Not thread-safe on its own: the owning ``QueueStore`` holds its lock around every call, and only
its ``sync()`` closes the write fd, so a worker thread never fsyncs a recycled descriptor.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import secrets
from pathlib import Path

from hutch_broker.store import files, records

FLUSH_THRESHOLD = 1024 * 1024
# A flush whose chunks average at most this many bytes is joined into one buffer and written
# with one pwrite: copying small chunks once costs less than pwritev taking each on its own,
# larger ones cost more to copy (measured: docs/bench/profile.md, "Scenario 2's repeats").
JOIN_CHUNKS_UP_TO = 1024
# Buffers one pwritev takes (Linux's IOV_MAX); a flush of more chunks takes several calls.
IOV_MAX = 1024
SEGMENT_PREFIX = "msgs."
ACK_PREFIX = "acks."
TOMBSTONE_SUFFIX = ".deleted"
# A msg id's layout (segment number, offset) is part of the record format: records.msg_id_of.


def segment_name(number: int) -> str:
    return f"{SEGMENT_PREFIX}{number:010d}"


def ack_name(number: int) -> str:
    return f"{ACK_PREFIX}{number:010d}"


def tombstone_name(number: int) -> str:
    """What ``msgs.N`` is renamed to while it is deleted (see ``Segment.unlink``)."""
    return f"{segment_name(number)}{TOMBSTONE_SUFFIX}"


def parse_tombstone(name: str) -> int | None:
    """The segment number of a ``msgs.N.deleted`` name, None for any other name."""
    stem = name.removesuffix(TOMBSTONE_SUFFIX)
    return None if stem == name else parse_number(stem, SEGMENT_PREFIX)


def parse_number(name: str, prefix: str) -> int | None:
    """The segment number of a ``msgs.N``/``acks.N`` file name, None for any other name."""
    digits = name.removeprefix(prefix)
    if digits == name or len(digits) != 10 or not digits.isdigit():
        return None
    return int(digits)


class Segment:
    """State of one ``msgs.N`` file: size, live offsets, unflushed bytes, pending acks."""

    __slots__ = (
        "ack_fd",
        "ack_pending",
        "data_start",
        "directory",
        "fd",
        "flushed",
        "live",
        "live_bytes",
        "number",
        "pending",
        "pending_at",
        "retire_gen",
        "salt",
        "sealed",
        "size",
        "unsynced",
    )

    def __init__(
        self,
        directory: Path,
        number: int,
        *,
        size: int,
        live: dict[int, int],
        salt: int,
        data_start: int = records.FILE_HEADER_SIZE,
    ) -> None:
        self.directory = directory
        self.number = number
        self.salt = salt  # from the file header; every record's checksum depends on it
        self.data_start = data_start  # the header's size: where the records start
        self.size = size  # logical end: bytes in the file plus bytes still in ``pending``
        self.flushed = size  # bytes handed to the kernel
        # The chunks of each write not yet handed to the kernel, and where each write starts.
        self.pending: list[tuple[bytes, ...]] = []
        self.pending_at: list[int] = []
        self.fd = -1  # open only while the segment is (or was just) written
        self.live = live  # offset -> record length of every record not yet acked
        self.live_bytes = sum(live.values())
        self.sealed = True
        self.unsynced = False  # bytes handed to the kernel, or buffered, but not fsynced
        self.ack_pending = bytearray()
        self.ack_fd = -1
        # Non-zero: retiring, to unlink at the end of that sync generation. The one way to ask
        # is ``if segment.retire_gen`` (no ``retiring`` property: the ack path asks once per
        # acked message, and a property was a Python call each time).
        self.retire_gen = 0

    @classmethod
    def create(cls, directory: Path, number: int, *, identity: bytes) -> Segment:
        """A new, empty, writable segment of the queue with this identity (``records``); the
        file exists when this returns."""
        segment = cls(directory, number, size=0, live={}, salt=secrets.randbits(64))
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        segment.fd = os.open(segment.path, flags, 0o644)
        segment.sealed = False
        segment.write(records.file_header(segment.salt, identity))
        return segment

    @property
    def path(self) -> Path:
        return self.directory / segment_name(self.number)

    @property
    def ack_path(self) -> Path:
        return self.directory / ack_name(self.number)

    def seed(self, offset: int) -> int:
        """The checksum seed of a record at ``offset`` in this segment (see ``records``)."""
        return records.record_seed(self.salt, offset)

    def write(self, *chunks: bytes) -> None:
        """Buffer ``chunks`` at the segment's end; kept by reference, so they must not change."""
        size = self.size
        self.pending_at.append(size)
        self.pending.append(chunks)
        for chunk in chunks:
            size += len(chunk)
        self.size = size
        self.unsynced = True
        if size - self.flushed >= FLUSH_THRESHOLD:
            self.flush()

    def add_record(self, offset: int, length: int) -> None:
        self.live[offset] = length
        self.live_bytes += length

    def flush(self) -> None:
        """Hand the buffered bytes to the kernel (no fsync)."""
        if not self.pending:
            return
        chunks = list(itertools.chain.from_iterable(self.pending))
        _pwrite_all(self.fd, chunks, self.flushed, self.size - self.flushed)
        self.flushed = self.size
        self.pending.clear()
        self.pending_at.clear()

    def ack(self, offset: int) -> int | None:
        """Record an ack in memory and in the ack buffer; the record length, None if not live."""
        length = self.live.pop(offset, None)
        if length is None:
            return None
        self.live_bytes -= length
        self.ack_pending += records.encode_ack(offset)
        return length

    def take_acks(self) -> bytearray:
        """The buffered acks, handed to a sync pass (``write_acks``) and cleared here."""
        taken, self.ack_pending = self.ack_pending, bytearray()
        return taken

    def write_acks(self, data: bytearray) -> None:
        """Append acks taken by ``take_acks`` to the ack file."""
        if self.ack_fd < 0:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
            self.ack_fd = os.open(self.ack_path, flags, 0o644)
        files.write_view(self.ack_fd, data)

    def read_pending(self, offset: int, length: int) -> bytes | None:
        """The record at ``offset`` if it is still in the userspace buffer."""
        if offset < self.flushed:
            return None
        index = bisect.bisect_right(self.pending_at, offset) - 1
        start = offset - self.pending_at[index]
        parts: list[bytes] = []
        have = -start
        for chunks in itertools.islice(self.pending, index, None):  # a record is one write
            parts += chunks
            have += sum(map(len, chunks))
            if have >= length:
                break
        return b"".join(parts)[start : start + length]

    def drop(self) -> None:
        """Forget buffered data and live offsets of a segment about to be unlinked."""
        self.pending.clear()
        self.pending_at.clear()
        self.ack_pending.clear()
        self.live.clear()
        self.live_bytes = 0
        self.flushed = self.size

    def close_write_fd(self) -> None:
        """Once sealed and synced, a segment is never written again."""
        if self.sealed and self.fd >= 0 and not self.unsynced and not self.pending:
            os.close(self.fd)
            self.fd = -1

    def close_ack_fd(self) -> None:
        """The ack file is reopened on demand."""
        if self.ack_fd >= 0 and not self.ack_pending:
            os.close(self.ack_fd)
            self.ack_fd = -1

    def close_files(self) -> None:
        for fd in (self.fd, self.ack_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = -1
        self.ack_fd = -1

    def unlink(self) -> None:
        """Remove both files so that a crash at any point leaves a state recovery recognises.

        Two unlinks cannot be atomic: removing the segment first left, after a crash between
        them, an ack file without its segment, which is also what a lost segment looks like
        (damage); removing the ack file first would bring every acked message of the segment
        back. So the segment file is first renamed to a tombstone (atomic: ``msgs.N`` is
        gone), then the ack file is removed, then the tombstone. A tombstone found at start-up
        says "this segment was being deleted": recovery finishes the job quietly
        (``recovery.finish_deletions``), while an ack file without a segment or a tombstone
        stays what it is: damage.
        """
        self.close_files()
        tombstone = self.directory / tombstone_name(self.number)
        with contextlib.suppress(FileNotFoundError):  # a file set aside by recovery
            os.rename(self.path, tombstone)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.ack_path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tombstone)


def _pwrite_all(fd: int, chunks: list[bytes], offset: int, size: int) -> None:
    """Write ``chunks`` (``size`` bytes in all) back to back from ``offset``: joined into one
    buffer when they are small (``JOIN_CHUNKS_UP_TO``), else with ``pwritev``, IOV_MAX at a
    time; a short ``pwritev``'s rest goes out joined (the kernel writes a regular file whole
    unless the disk is full)."""
    if size <= JOIN_CHUNKS_UP_TO * len(chunks):
        files.write_view(fd, b"".join(chunks), offset)
        return
    for first in range(0, len(chunks), IOV_MAX):
        group = chunks[first : first + IOV_MAX]
        size = sum(map(len, group))
        written = os.pwritev(fd, group, offset)
        if written < size:
            files.write_view(fd, memoryview(b"".join(group))[written:], offset + written)
        offset += size
