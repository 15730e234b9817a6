"""QueueStore.read_run: a stream's reads of consecutive records in one pread.

Why its own tests: a run must be exactly what one ``read`` per record would return, and stop
(never guess) where a record is acked, still in the write buffer, cut by the chunk's end or
damaged; the first record behaves as ``read`` does, errors included.
"""

from __future__ import annotations

import itertools
import os

import pytest
from hutch_broker.store import CorruptRecordError, MessageNotFoundError, records, segments

BIG = 1 << 20  # one segment holds every record here


def _queue(open_store):
    return open_store(segment_size=BIG).open_queue("/", "q")


def _ids_of(run):
    return [record.msg_id for record in run]


def _stored(record):
    """A run's record as ``read`` returns it (its fields but its length)."""
    return records.StoredMessage(*record[:-1])


def test_a_run_is_what_reads_one_by_one_return_with_each_records_length(open_store, fill):
    queue = _queue(open_store)
    ids = fill(queue, 30)
    queue.sync()

    run = queue.read_run(ids[0], BIG)

    assert [_stored(record) for record in run] == [queue.read(msg_id) for msg_id in ids]
    assert [record.msg_id + record.length for record in run][:-1] == ids[1:]


def test_a_run_stops_at_the_chunk_size_but_always_holds_the_first_record(open_store, fill):
    queue = _queue(open_store)
    ids = fill(queue, 30, body_size=100)
    queue.sync()
    length = ids[1] - ids[0]

    assert _ids_of(queue.read_run(ids[2], 3 * length + length // 2)) == ids[2:5]
    assert _ids_of(queue.read_run(ids[2], 1)) == [ids[2]]  # larger than the chunk: alone, whole


def test_a_run_stops_before_an_acked_record(open_store, fill):
    queue = _queue(open_store)
    ids = fill(queue, 10)
    queue.sync()
    queue.ack(ids[4])

    assert _ids_of(queue.read_run(ids[0], BIG)) == ids[:4]
    assert _ids_of(queue.read_run(ids[5], BIG)) == ids[5:]
    with pytest.raises(MessageNotFoundError):
        queue.read_run(ids[4], BIG)


def test_records_still_in_the_write_buffer_are_read_one_at_a_time(open_store, fill):
    queue = _queue(open_store)
    ids = fill(queue, 10)
    queue.sync()
    later = fill(queue, 5, first=10)  # appended, not yet handed to the kernel

    assert _ids_of(queue.read_run(ids[0], BIG)) == ids  # the flushed part only
    assert _ids_of(queue.read_run(later[0], BIG)) == [later[0]]
    assert _stored(queue.read_run(later[0], BIG)[0]) == queue.read(later[0])


def test_a_damaged_record_ends_the_run_before_it_and_is_an_error_when_first(open_store, fill):
    queue = _queue(open_store)
    ids = fill(queue, 10)
    queue.sync()
    number, offset = records.split_msg_id(ids[6])
    path = queue.directory / segments.segment_name(number)
    with path.open("r+b") as segment:
        segment.seek(offset + records.HEADER_SIZE + 2)
        byte = segment.read(1)
        segment.seek(offset + records.HEADER_SIZE + 2)
        segment.write(bytes([byte[0] ^ 0xFF]))
        segment.flush()
        os.fsync(segment.fileno())

    assert _ids_of(queue.read_run(ids[0], BIG)) == ids[:6]
    with pytest.raises(CorruptRecordError):
        queue.read_run(ids[6], BIG)
    assert _ids_of(queue.read_run(ids[7], BIG)) == ids[7:]


def test_decode_run_takes_what_decode_record_takes_and_stops_where_it_refuses(open_store, fill):
    """``records.decode_run`` is ``decode_record`` for a run, in one loop (fewer calls a
    stream delivery): the same records, and it stops before a record sealed for another
    position, one whose msg_id is not its position's, one cut by the chunk's end, and a
    damaged one."""
    queue = _queue(open_store)
    ids = fill(queue, 5)
    queue.sync()
    number, first = records.split_msg_id(ids[0])
    data = (queue.directory / segments.segment_name(number)).read_bytes()
    salt = records.parse_file_header(data).salt
    offsets = [records.split_msg_id(msg_id)[1] for msg_id in ids]
    lengths = [b - a for a, b in itertools.pairwise(offsets)]
    lengths.append(records.framed_length(data, offsets[-1]) or 0)
    chunk = data[first : first + sum(lengths)]

    def run(chunk: bytes, msg_id: int = ids[0], offset: int = first) -> list:
        found = records.decode_run(chunk, msg_id, lengths, salt=salt, offset=offset)
        return [(_stored(record), record.length) for record in found]

    one_by_one = [
        (records.decode_record(data, at, seed=records.record_seed(salt, at)), length)
        for at, length in zip(offsets, lengths, strict=True)
    ]
    assert run(chunk) == one_by_one
    assert run(chunk, offset=first + 1) == []  # every checksum is seeded by its position
    assert run(chunk, msg_id=ids[0] + 1) == []
    assert run(chunk[: sum(lengths[:3]) - 1]) == one_by_one[:2]
    damaged = bytearray(chunk)
    damaged[sum(lengths[:2]) + records.HEADER_SIZE + 2] ^= 0xFF
    assert run(bytes(damaged)) == one_by_one[:2]
