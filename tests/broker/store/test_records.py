"""The record and ack formats on their own: round trips, limits, and what counts as valid."""

from __future__ import annotations

import pytest
from hutch_broker.store import StoredMessage, records


def encode(msg_id=(1 << 32) | 8, body=b"hello", **overrides):
    fields = {
        "enqueued_at_ms": 1_700_000_000_000,
        "expire_at_ms": 0,
        "exchange": b"amq.direct",
        "routing_key": b"key",
        "raw_properties": b"\x90\x00\x02",
        **overrides,
    }
    return records.encode_head(msg_id=msg_id, body=body, **fields) + body


def test_round_trip_and_size():
    record = encode()
    assert len(record) == records.record_size(
        exchange=b"amq.direct", routing_key=b"key", raw_properties=b"\x90\x00\x02", body=b"hello"
    )
    assert records.decode_record(record, 0) == StoredMessage(
        (1 << 32) | 8, 1_700_000_000_000, 0, "amq.direct", "key", b"\x90\x00\x02", b"hello"
    )
    assert records.checked_msg_id(record, 0) == (1 << 32) | 8


def test_every_truncation_and_every_bit_is_detected():
    record = encode(body=bytes(range(40)))
    for cut in range(len(record)):
        assert records.decode_record(record[:cut], 0) is None
    for position in range(len(record)):
        for bit in range(8):
            damaged = bytearray(record)
            damaged[position] ^= 1 << bit
            assert records.decode_record(bytes(damaged), 0) is None, (position, bit)


def test_names_are_short_strings():
    assert records.encode_name("é" * 127, what="x") == "é".encode() * 127
    with pytest.raises(ValueError, match="exchange name longer than 255"):
        records.encode_name("e" * 256, what="exchange name")


def test_scan_skips_a_corrupt_middle_record_and_stops_at_a_torn_tail():
    first, second, third = (encode(msg_id=(1 << 32) | 8 + 100 * i) for i in range(3))
    assert len(first) < 100
    padded = [part + bytes(100 - len(part)) for part in (first, second, third)]
    data = records.FILE_HEADER + b"".join(padded)  # zero gaps are corrupt bytes too
    broken = bytearray(data)
    broken[108 + 30] ^= 0xFF  # inside the second record
    scan = records.scan_segment(bytes(broken[:-50]), number=1)
    assert [offset for offset, _, _ in scan.records] == [8]  # third one is torn
    scan = records.scan_segment(bytes(broken), number=1)
    assert [offset for offset, _, _ in scan.records] == [8, 208]
    assert scan.skipped == [8 + len(first)]


def test_a_record_at_a_foreign_position_is_not_served():
    record = encode(msg_id=(5 << 32) | 8)  # claims to be segment 5's, found in segment 2
    scan = records.scan_segment(records.FILE_HEADER + record, number=2)
    assert scan.records == []
    assert scan.valid_end == records.FILE_HEADER_SIZE


def test_ack_records():
    data = records.encode_ack(8) + records.encode_ack(4242) + bytes(8) + records.encode_ack(9)
    assert records.scan_acks(data) == ([8, 4242], 16)
    assert records.scan_acks(data[:13]) == ([8], 8)
