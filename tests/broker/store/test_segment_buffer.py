"""A segment's write buffer: the appended chunks kept by reference until a flush writes them.

Why: the buffer was one ``bytearray`` every record was copied into, emptied after each flush;
at the few hundred KiB a group commit buffers under confirms its regrowth cost ten times the
copy (docs/bench/profile.md). These pin that an append copies no body, and that what reaches
the file is still every byte in order: over more chunks than one ``pwritev`` takes, through a
short write, and read back while still buffered.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

from hutch_broker.store import records, segments

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
    segment = segments.Segment.create(tmp_path, 1, identity=IDENTITY)
    start = segment.size
    pairs = chunk_pairs(10)
    for head, body in pairs:
        segment.write(head, body)
    pwritev = os.pwritev

    def short(fd: int, buffers: list[bytes], offset: int) -> int:
        return pwritev(fd, buffers[:3], offset) - 7  # a partial write, mid-chunk

    monkeypatch.setattr(segments.os, "pwritev", short)
    segment.flush()
    assert file_bytes(segment)[start:] == b"".join(h + b for h, b in pairs)
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
