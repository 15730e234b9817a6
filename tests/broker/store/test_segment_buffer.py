"""A segment's write buffer: the appended chunks kept by reference until a flush writes them.

Why: the buffer was one ``bytearray`` every record was copied into, emptied after each flush;
at the few hundred KiB a group commit buffers under confirms its regrowth cost ten times the
copy (docs/bench/profile.md). These pin that an append copies no body, and that what reaches
the file is still every byte in order: joined into one write when the chunks are small, by
reference with ``pwritev`` when they are large and over more chunks than one ``pwritev``
takes, through short writes (of the records and of the ack file, which share
``files.write_view``), and read back while still buffered.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from hutch_broker.store import files, records, segments

IDENTITY = records.queue_identity("/", "q")


def chunk_pairs(count: int, size: int = 1024) -> list[tuple[bytes, bytes]]:
    """(head, body) pairs, each byte sequence distinct so a misplaced one shows."""
    return [(b"h%05d" % n, os.urandom(size)) for n in range(count)]


class Calls:
    """Counts the calls of ``os.pwritev`` and ``os.pwrite`` while passing them on."""

    def __init__(self, monkeypatch) -> None:
        self.pwritev = self.pwrite = 0
        pwritev, pwrite = os.pwritev, os.pwrite

        def counted_pwritev(fd: int, buffers: list[bytes], offset: int) -> int:
            self.pwritev += 1
            return pwritev(fd, buffers, offset)

        def counted_pwrite(fd: int, data: memoryview, offset: int) -> int:
            self.pwrite += 1
            return pwrite(fd, data, offset)

        monkeypatch.setattr(segments.os, "pwritev", counted_pwritev)
        monkeypatch.setattr(files.os, "pwrite", counted_pwrite)


def file_bytes(segment: segments.Segment) -> bytes:
    return segment.path.read_bytes()


def test_appends_copy_no_body_into_the_buffer(tmp_path: Path) -> None:
    segment = segments.Segment.create(tmp_path, 1, identity=IDENTITY)
    pairs = chunk_pairs(400)  # 400 KiB of bodies, under the flush threshold
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for head, body in pairs:
            segment.write(head, body)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert segment.flushed < segment.size, "still buffered"
    assert grown < 100 * 1024, f"{grown} bytes held for 400 KiB of bodies: copied"
    segment.flush()
    header = file_bytes(segment)[: segment.data_start]
    assert file_bytes(segment) == header + b"".join(h + b for h, b in pairs)
    segment.close_files()


def test_a_flush_of_small_chunks_is_one_joined_write(tmp_path: Path, monkeypatch) -> None:
    """1 KiB bodies (scenario 2's): a copy into one buffer and one ``pwrite`` per flush, which
    costs less than ``pwritev`` taking 2,000 chunks one by one; every byte in order."""
    segment = segments.Segment.create(tmp_path, 1, identity=IDENTITY)
    start = segment.size
    pairs = chunk_pairs(1000)
    calls = Calls(monkeypatch)
    for head, body in pairs:
        segment.write(head, body)
    segment.flush()
    assert (calls.pwritev, calls.pwrite) == (0, 1)
    assert segment.flushed == segment.size == os.path.getsize(segment.path)
    assert file_bytes(segment)[start:] == b"".join(h + b for h, b in pairs)
    segment.close_files()


def test_a_flush_of_large_chunks_goes_by_reference(tmp_path: Path, monkeypatch) -> None:
    """64 KiB bodies are not copied to be written: one ``pwritev`` per flush (the threshold's
    own flush on the way, then the rest), every byte in order."""
    segment = segments.Segment.create(tmp_path, 1, identity=IDENTITY)
    start = segment.size
    pairs = chunk_pairs(20, size=64 * 1024)  # past the threshold: one flush on the way
    calls = Calls(monkeypatch)
    for head, body in pairs:
        segment.write(head, body)
    assert 0 < segment.flushed - start < segment.size - start, "flushed once, some still buffered"
    segment.flush()
    assert (calls.pwritev, calls.pwrite) == (2, 0)
    assert file_bytes(segment)[start:] == b"".join(h + b for h, b in pairs)
    segment.close_files()


def test_more_chunks_than_one_pwritev_takes_are_written_all_in_order(tmp_path: Path) -> None:
    """A segment's own flushes never hand over that many large chunks (the threshold flushes
    first), so the writer is called directly: 3,000 chunks of 2 KiB, three ``pwritev``."""
    chunks = [os.urandom(2048) for _ in range(3000)]
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        segments._pwrite_all(fd, chunks, 10, sum(map(len, chunks)))
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == bytes(10) + b"".join(chunks)


@pytest.mark.parametrize("size", [1024, 8192])
def test_a_short_write_is_finished(tmp_path: Path, monkeypatch, size: int) -> None:
    """The kernel may write less than asked (a full disk, a signal). Small chunks go out in
    one ``pwrite``, large ones with ``pwritev`` (stopping mid-chunk here): each ``pwrite`` that
    finishes the rest writes at most 5 bytes."""
    segment = segments.Segment.create(tmp_path, 1, identity=IDENTITY)
    start = segment.size
    pairs = chunk_pairs(10, size)
    for head, body in pairs:
        segment.write(head, body)
    pwritev, pwrite = os.pwritev, os.pwrite
    tails: list[int] = []
    vectored: list[int] = []

    def short(fd: int, buffers: list[bytes], offset: int) -> int:
        vectored.append(offset)
        return pwritev(fd, buffers[:3], offset) - 7  # a partial write, mid-chunk

    def short_tail(fd: int, data: memoryview, offset: int) -> int:
        tails.append(offset)
        return pwrite(fd, data[:5], offset)

    monkeypatch.setattr(segments.os, "pwritev", short)
    monkeypatch.setattr(files.os, "pwrite", short_tail)
    segment.flush()
    monkeypatch.undo()
    assert file_bytes(segment)[start:] == b"".join(h + b for h, b in pairs)
    assert segment.flushed == segment.size == os.path.getsize(segment.path)
    assert len(vectored) == (0 if size == 1024 else 1), "the path taken"
    assert len(tails) > 100, "the rest went out in many short writes"
    assert tails == sorted(set(tails)), "each one after the last"
    segment.close_files()


def test_a_short_write_of_the_ack_file_is_finished(tmp_path: Path, monkeypatch) -> None:
    """Acks are appended (``O_APPEND``, no offset): a write that takes 3 bytes at a time
    still leaves every ack record whole and in order."""
    segment = segments.Segment.create(tmp_path, 1, identity=IDENTITY)
    offsets = []
    for head, body in chunk_pairs(20):
        offsets.append(segment.size)
        segment.add_record(segment.size, len(head) + len(body))
        segment.write(head, body)
    segment.flush()
    for offset in offsets[:7]:
        segment.ack(offset)
    segment.write_acks(segment.take_acks())  # opens the file; these go out whole
    for offset in offsets[7:]:
        segment.ack(offset)
    write = os.write
    sizes: list[int] = []

    def short(fd: int, data: memoryview) -> int:
        sizes.append(len(data))
        return write(fd, data[:3])

    monkeypatch.setattr(files.os, "write", short)
    segment.write_acks(segment.take_acks())
    monkeypatch.undo()
    scan = records.scan_acks(segment.ack_path.read_bytes())
    assert scan == records.AckScan(offsets=offsets, bad=[], valid_end=8 * len(offsets))
    assert sizes[0] == 8 * 13 and len(sizes) == -(-8 * 13 // 3), "3 bytes a write"
    segment.close_files()


def test_a_buffered_record_reads_back_after_an_earlier_flush(tmp_path: Path) -> None:
    segment = segments.Segment.create(tmp_path, 1, identity=IDENTITY)
    segment.write(b"flushed", b"already")
    segment.flush()
    offsets = []
    pairs = chunk_pairs(5)
    for head, body in pairs:
        offsets.append(segment.size)
        segment.write(head, body)
    assert segment.read_pending(offsets[0] - 1, 1) is None, "in the file, not the buffer"
    for offset, (head, body) in zip(offsets, pairs, strict=True):
        assert segment.read_pending(offset, len(head) + len(body)) == head + body
    assert segment.read_pending(offsets[1] + 2, 4) == pairs[1][0][2:6]
    spanning = segment.read_pending(offsets[1] + len(pairs[1][0]), 1024 + 6)
    assert spanning == pairs[1][1] + pairs[2][0]
    segment.close_files()
