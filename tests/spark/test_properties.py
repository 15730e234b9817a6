"""The consumer's own basic-properties decoder against pika's, the independent oracle."""

import struct

import pika
import pika.spec
import pytest

pytestmark = pytest.mark.spark

CASES = [
    {},
    {"message_id": "hutch-1-42"},
    {"message_id": "m", "delivery_mode": 2, "timestamp": 1_700_000_000},
    {
        "content_type": "application/json",
        "content_encoding": "gzip",
        "headers": {"n": 7, "flag": True, "raw": b"\xff\x00", "nested": {"a": [1, "b"]}},
        "delivery_mode": 1,
        "priority": 9,
        "correlation_id": "c-1",
        "reply_to": "replies",
        "expiration": "60000",
        "message_id": "café",
        "timestamp": 1,
        "type": "order",
        "user_id": "guest",
        "app_id": "shop",
        "cluster_id": "eu",
    },
    {"headers": {}, "app_id": "only-app"},
]


@pytest.mark.parametrize("values", CASES)
def test_decoder_matches_pika(values: dict) -> None:
    from hutch_spark import properties

    encoded = b"".join(pika.spec.BasicProperties(**values).encode())
    prefix = struct.pack(">HHQ", 60, 0, 5)  # class id, weight, body size, as in the frame
    ours = properties.decode(prefix + encoded, len(prefix))
    theirs = pika.spec.BasicProperties().decode(encoded)
    for name in properties.Properties._fields:
        assert getattr(ours, name) == getattr(theirs, name), name


def test_a_short_string_that_is_not_utf8_stays_bytes_as_in_pika() -> None:
    from hutch_spark import properties

    encoded = struct.pack(">H", 0x0080) + bytes([2]) + b"\xff\xfe"  # message_id only
    assert properties.decode(encoded, 0).message_id == b"\xff\xfe"
    assert pika.spec.BasicProperties().decode(encoded).message_id == b"\xff\xfe"
