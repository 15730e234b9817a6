"""The record and ack formats on their own: round trips, limits, and what counts as valid."""

from __future__ import annotations

import pytest
from hutch_broker.store import StoredMessage, records

SALT = 0x1234_5678_9ABC_DEF0


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
    header = records.file_header(SALT)
    assert len(header) == records.FILE_HEADER_SIZE
    parsed = records.parse_file_header(header)
    assert parsed == records.FileHeader(records.HeaderState.VALID, records.FORMAT_VERSION, SALT)
    for position in range(len(header)):
        damaged = bytearray(header)
        damaged[position] ^= 0x02
        assert records.parse_file_header(bytes(damaged)).state is records.HeaderState.DAMAGED
    assert records.parse_file_header(header[:-1]).state is records.HeaderState.SHORT
    assert records.parse_file_header(b"HMSG\x01\x00\x00\x00" + bytes(40)).state is (
        records.HeaderState.OTHER_VERSION
    )


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
    first, second, third = (encode(msg_id=(1 << 32) | 20 + 100 * i) for i in range(3))
    assert len(first) < 100
    padded = [part + bytes(100 - len(part)) for part in (first, second, third)]
    data = records.file_header(SALT) + b"".join(padded)  # zero gaps are corrupt bytes too
    broken = bytearray(data)
    broken[120 + 30] ^= 0xFF  # inside the second record
    scan = records.scan_segment(bytes(broken[:-50]), number=1, salt=SALT)
    assert [offset for offset, _, _ in scan.records] == [20]  # third one is torn
    scan = records.scan_segment(bytes(broken), number=1, salt=SALT)
    assert [offset for offset, _, _ in scan.records] == [20, 220]
    assert scan.skipped == [(20 + len(first), 220)]


def test_a_record_at_a_foreign_position_is_not_served():
    record = encode(msg_id=(5 << 32) | 20)  # claims to be segment 5's, found in segment 2
    scan = records.scan_segment(records.file_header(SALT) + record, number=2, salt=SALT)
    assert scan.records == []
    assert scan.valid_end == records.FILE_HEADER_SIZE


def test_ack_records():
    data = records.encode_ack(8) + records.encode_ack(4242) + bytes(8) + records.encode_ack(9)
    assert records.scan_acks(data) == records.AckScan(offsets=[8, 4242, 9], bad=[16], valid_end=32)
    assert records.scan_acks(data[:13]) == records.AckScan(offsets=[8], bad=[], valid_end=8)
    assert records.scan_acks(data[:28]) == records.AckScan(offsets=[8, 4242], bad=[], valid_end=16)
