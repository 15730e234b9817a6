"""The record and ack formats on their own: round trips, limits, and what counts as valid."""

from __future__ import annotations

import random
import struct
import zlib

import pytest
from hutch_broker.store import StoredMessage, layout, records

SALT = 0x1234_5678_9ABC_DEF0
IDENTITY = bytes(range(16))
H = records.FILE_HEADER_SIZE


def seed(offset, salt=SALT):
    return records.record_seed(salt, offset)


def encode(msg_id=(1 << 32) | 20, body=b"hello", *, at=None, salt=SALT, **overrides):
    """A record sealed for offset ``at`` (default: the offset its msg_id names)."""
    offset = msg_id & 0xFFFF_FFFF if at is None else at
    fields = {
        "enqueued_at_ms": 1_700_000_000_000,
        "expire_at_ms": 0,
        "exchange": b"amq.direct",
        "routing_key": b"key",
        "raw_properties": b"\x90\x00\x02",
        **overrides,
    }
    return records.encode_head(seed=seed(offset, salt), msg_id=msg_id, body=body, **fields) + body


def test_round_trip_and_size():
    record = encode()
    assert len(record) == records.record_size(
        exchange=b"amq.direct", routing_key=b"key", raw_properties=b"\x90\x00\x02", body=b"hello"
    )
    assert records.decode_record(record, 0, seed=seed(20)) == StoredMessage(
        (1 << 32) | 20, 1_700_000_000_000, 0, "amq.direct", "key", b"\x90\x00\x02", b"hello"
    )
    assert records.checked_msg_id(record, 0, seed=seed(20)) == (1 << 32) | 20


def test_a_record_verifies_only_for_its_own_salt_and_offset():
    record = encode()
    assert records.decode_record(record, 0, seed=seed(20)) is not None
    assert records.decode_record(record, 0, seed=seed(21)) is None
    assert records.decode_record(record, 0, seed=seed(20, salt=SALT + 1)) is None
    moved = records.reseal(record, seed(4000, salt=7))  # a compaction copy elsewhere
    assert records.decode_record(moved, 0, seed=seed(4000, salt=7)) is not None
    assert records.decode_record(moved, 0, seed=seed(20)) is None


def test_file_header_round_trip_and_damage():
    header = records.file_header(SALT, IDENTITY)
    assert len(header) == records.FILE_HEADER_SIZE
    parsed = records.parse_file_header(header)
    assert parsed == records.FileHeader(
        records.HeaderState.VALID, records.FORMAT_VERSION, SALT, identity=IDENTITY
    )
    for position in range(len(header)):  # any one damaged field: the other copy restores it
        damaged = bytearray(header)
        damaged[position] ^= 0x02
        repairable = records.parse_file_header(bytes(damaged))
        assert repairable.state is records.HeaderState.REPAIRABLE, position
        assert (repairable.salt, repairable.identity) == (SALT, IDENTITY), position
    assert records.parse_file_header(header[:-1]).state is records.HeaderState.SHORT
    assert records.parse_file_header(header[:25]).state is records.HeaderState.SHORT
    unsalted = records.parse_file_header(b"HMSG\x01\x00\x00\x00" + bytes(90))
    assert (unsalted.state, unsalted.version) == (records.HeaderState.DAMAGED, 1)  # the records
    # decide: none verifies in a version 1 file, and recovery refuses it (test_recovery)
    future = records.file_header_v2(SALT, version=4) + bytes(60)  # intact: another format
    assert records.parse_file_header(future).state is records.HeaderState.OTHER_VERSION


def test_the_field_a_repair_restores_is_named():
    damaged = bytearray(records.file_header(SALT, IDENTITY))
    damaged[records.COPY_SIZE + 9] ^= 0xFF
    assert records.parse_file_header(bytes(damaged)).damage == (
        "its second copy is damaged (salt), the first copy is intact"
    )


def test_the_same_field_damaged_in_both_copies_leaves_candidates_for_the_records():
    damaged = bytearray(records.file_header(SALT, IDENTITY))
    damaged[9] ^= 0x01
    damaged[records.COPY_SIZE + 9] ^= 0x02
    parsed = records.parse_file_header(bytes(damaged))
    assert parsed.state is records.HeaderState.DAMAGED
    assert [(c.version, c.size) for c in parsed.candidates] == [
        (2, records.V2_HEADER_SIZE),
        (3, records.FILE_HEADER_SIZE),
        (3, records.FILE_HEADER_SIZE),
    ]
    assert SALT not in {c.salt for c in parsed.candidates}  # the records find no match
    assert {c.identity for c in parsed.candidates} == {None, IDENTITY}


def test_a_version_2_header_is_read():
    """Version 2 (one 20-byte copy, no identity), the format before version 3."""
    header = records.file_header_v2(SALT)
    assert records.parse_file_header(header + bytes(60)) == records.FileHeader(
        records.HeaderState.VALID, 2, SALT, size=records.V2_HEADER_SIZE
    )
    assert records.header_size(header) == records.V2_HEADER_SIZE
    damaged = bytearray(header)
    damaged[10] ^= 0x01
    parsed = records.parse_file_header(bytes(damaged) + bytes(60))
    assert parsed.state is records.HeaderState.DAMAGED
    assert (parsed.candidates[0].version, parsed.candidates[0].salt) == (2, SALT ^ (1 << 16))


def test_each_copy_starts_as_an_intact_version_2_header_of_version_3():
    """So that a broker reading version 2 only refuses a version 3 segment (another format),
    instead of taking it for a damaged header and rewriting it."""
    header = records.file_header(SALT, IDENTITY)
    for start in (0, records.COPY_SIZE):
        prefix = header[start : start + records.V2_HEADER_SIZE]
        assert prefix == records.file_header_v2(SALT, version=3)


def test_the_queue_identity_names_the_queue_directory(tmp_path):
    identity = records.queue_identity("/", "q")
    assert len(identity) == records.IDENTITY_SIZE
    assert layout.queue_path(tmp_path, "/", "q").name == identity.hex()
    assert identity not in (records.queue_identity("/", "q2"), records.queue_identity("v", "q"))
    with pytest.raises(ValueError, match="queue identity of 3 bytes"):
        records.file_header(SALT, b"abc")


def test_every_truncation_and_every_bit_is_detected():
    record = encode(body=bytes(range(40)))
    for cut in range(len(record)):
        assert records.decode_record(record[:cut], 0, seed=seed(20)) is None
    for position in range(len(record)):
        for bit in range(8):
            damaged = bytearray(record)
            damaged[position] ^= 1 << bit
            assert records.decode_record(bytes(damaged), 0, seed=seed(20)) is None


def test_names_are_short_strings():
    assert records.encode_name("é" * 127, what="x") == "é".encode() * 127
    with pytest.raises(ValueError, match="exchange name longer than 255"):
        records.encode_name("e" * 256, what="exchange name")


def test_scan_skips_a_corrupt_middle_record_and_stops_at_a_torn_tail():
    first, second, third = (encode(msg_id=(1 << 32) | H + 100 * i) for i in range(3))
    assert len(first) < 100
    padded = [part + bytes(100 - len(part)) for part in (first, second, third)]
    data = records.file_header(SALT, IDENTITY) + b"".join(padded)  # zero gaps are corrupt too
    broken = bytearray(data)
    broken[H + 100 + 30] ^= 0xFF  # inside the second record
    scan = records.scan_segment(bytes(broken[:-50]), number=1, salt=SALT)
    assert [offset for offset, _, _ in scan.records] == [H]  # third one is torn
    scan = records.scan_segment(bytes(broken), number=1, salt=SALT)
    assert [offset for offset, _, _ in scan.records] == [H, H + 200]
    assert scan.skipped == [(H + len(first), H + 200)]


def test_a_record_at_a_foreign_position_is_not_served():
    record = encode(msg_id=(5 << 32) | H)  # claims to be segment 5's, found in segment 2
    scan = records.scan_segment(records.file_header(SALT, IDENTITY) + record, number=2, salt=SALT)
    assert scan.records == []
    assert scan.valid_end == H


def test_ack_records():
    data = records.encode_ack(8) + records.encode_ack(4242) + bytes(8) + records.encode_ack(9)
    assert records.scan_acks(data) == records.AckScan(offsets=[8, 4242, 9], bad=[16], valid_end=32)
    assert records.scan_acks(data[:13]) == records.AckScan(offsets=[8], bad=[], valid_end=8)
    assert records.scan_acks(data[:28]) == records.AckScan(offsets=[8, 4242], bad=[], valid_end=16)


def test_an_ack_record_is_its_offset_and_the_salted_checksum_of_it():
    """The format on disk, pinned to its bytes: ack files written by an older broker must
    still read, whichever function spells the check out."""
    check = zlib.crc32((4242).to_bytes(4, "little")) ^ 0x4841434B
    assert records.encode_ack(4242) == struct.pack("<II", 4242, check)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_an_ack_record_with_any_bit_flipped_is_skipped(kind):
    """``scan_acks`` takes a record as valid only when it is exactly what ``encode_ack``
    writes for its offset, in any buffer type recovery hands it."""
    good = records.encode_ack(77)
    for bit in range(len(good) * 8):
        flipped = bytearray(good)
        flipped[bit // 8] ^= 1 << (bit % 8)
        data = kind(bytes(flipped) + good)
        assert records.scan_acks(data) == records.AckScan(offsets=[77], bad=[0], valid_end=16), bit


def _scan_acks_by_slices(data: bytes) -> records.AckScan:
    """The rule ``scan_acks`` keeps, record by record: valid when exactly ``encode_ack``'s bytes."""
    offsets, bad, valid_end = [], [], 0
    for pos in range(0, len(data) - records.ACK_RECORD_SIZE + 1, records.ACK_RECORD_SIZE):
        offset = int.from_bytes(data[pos : pos + 4], "little")
        if data[pos : pos + records.ACK_RECORD_SIZE] == records.encode_ack(offset):
            offsets.append(offset)
            bad.extend(range(valid_end, pos, records.ACK_RECORD_SIZE))
            valid_end = pos + records.ACK_RECORD_SIZE
    return records.AckScan(offsets=offsets, bad=bad, valid_end=valid_end)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_the_whole_buffer_ack_scan_agrees_with_encode_ack_record_by_record(kind):
    """``scan_acks`` unpacks a whole buffer at once: over good records (offsets 0 and 2**32-1
    among them), records with their check or offset changed, zeros, random bytes and torn
    tails of every length, it finds what comparing each record with ``encode_ack`` finds."""
    rng = random.Random(32)
    pieces = [records.encode_ack(0), records.encode_ack(0xFFFF_FFFF)]
    for _ in range(400):
        offset = rng.randrange(1 << 32)
        good = records.encode_ack(offset)
        choice = rng.randrange(5)
        if choice == 0:
            pieces.append(good[:4] + (int.from_bytes(good[4:], "little") ^ 1).to_bytes(4, "little"))
        elif choice == 1:
            pieces.append(((offset + 1) % (1 << 32)).to_bytes(4, "little") + good[4:])
        elif choice == 2:
            pieces.append(rng.randbytes(8) if rng.random() < 0.5 else bytes(8))
        else:
            pieces.append(good)
    data = b"".join(pieces)
    for tail in range(records.ACK_RECORD_SIZE):
        torn = data + records.encode_ack(4242)[:tail]
        expected = _scan_acks_by_slices(torn)
        assert expected.bad and expected.valid_end <= len(data)  # the mix holds every case
        assert records.scan_acks(kind(torn)) == expected, tail


def test_an_ack_scan_of_a_view_into_a_larger_buffer_reads_only_the_view():
    """A view that starts and ends inside a buffer: its own records, its own tail."""
    data = bytes(3) + records.encode_ack(8) + records.encode_ack(16) + records.encode_ack(24)
    view = memoryview(data)[3 : 3 + 8 + 8 + 5]
    assert records.scan_acks(view) == records.AckScan(offsets=[8, 16], bad=[], valid_end=16)
    assert records.scan_acks(b"") == records.AckScan(offsets=[], bad=[], valid_end=0)
