"""A segment's write buffer: the appended chunks kept by reference until a flush writes them.

Why: the buffer was one ``bytearray`` every record was copied into, emptied after each flush;
at the few hundred KiB a group commit buffers under confirms its regrowth cost ten times the
copy (docs/bench/profile.md). These pin that an append copies no body, and that what reaches
the file is still every byte in order: over more chunks than one ``pwritev`` takes, through
short writes (of the records and of the ack file, which share ``files.write_view``), and read
back while still buffered.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

from hutch_broker.store import files, records, segments

IDENTITY = records.queue_identity("/", "q")


def chunk_pairs(count: int) -> list[tuple[bytes, bytes]]:
    """(head, body) pairs, each byte sequence distinct so a misplaced one shows."""
    return [(b"h%05d" % n, os.urandom(1024)) for n in range(count)]


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


def test_a_flush_of_more_chunks_than_one_pwritev_takes_writes_them_all_in_order(
    tmp_path: Path,
) -> None:
    segment = segments.Segment.create(tmp_path, 1, identity=IDENTITY)
    start = segment.size
    pairs = chunk_pairs(1500)  # 3,000 chunks; past the threshold, so one flush on the way
    for head, body in pairs:
        segment.write(head, body)
    assert 0 < segment.flushed - start < segment.size - start, "flushed once, some still buffered"
    segment.flush()
    assert segment.flushed == segment.size == os.path.getsize(segment.path)
    assert file_bytes(segment)[start:] == b"".join(h + b for h, b in pairs)
    segment.close_files()


def test_a_short_write_is_finished(tmp_path: Path, monkeypatch) -> None:
    """The kernel may write less than asked (a full disk, a signal): ``pwritev`` stops
    mid-chunk, and each ``pwrite`` that finishes the rest writes at most 5 bytes."""
    segment = segments.Segment.create(tmp_path, 1, identity=IDENTITY)
    start = segment.size
    pairs = chunk_pairs(10)
    for head, body in pairs:
        segment.write(head, body)
    pwritev, pwrite = os.pwritev, os.pwrite
    tails: list[int] = []

    def short(fd: int, buffers: list[bytes], offset: int) -> int:
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
