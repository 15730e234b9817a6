"""Raw content-header properties: accessors, validation, decode/encode (IMPL-1, IMPL-2)."""

from __future__ import annotations

import datetime
import decimal
import random
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hutch_broker.protocol import properties
from pamqp import commands, header


def table(*entries: tuple[str, bytes]) -> bytes:
    """A field table with its length prefix, from (key, tagged raw value) pairs."""
    content = b"".join(bytes([len(k)]) + k.encode() + v for k, v in entries)
    return struct.pack(">I", len(content)) + content


def short(text: str) -> bytes:
    return bytes([len(text.encode())]) + text.encode()


EVERY_TYPE = table(
    ("t", b"t\x01"),
    ("b", b"b\xff"),
    ("B", b"B\xff"),
    ("s", b"s\xff\xfe"),
    ("u", b"u\xff\xfe"),
    ("I", b"I" + struct.pack(">i", -5)),
    ("i", b"i" + struct.pack(">I", 4_000_000_000)),
    ("l", b"l" + struct.pack(">q", -(2**40))),
    ("L", b"L" + struct.pack(">q", 2**40)),
    ("f", b"f" + struct.pack(">f", 1.5)),
    ("d", b"d" + struct.pack(">d", 2.25)),
    ("D", b"D\x02" + struct.pack(">i", 12345)),
    ("S", b"S" + struct.pack(">I", 3) + b"abc"),
    ("S-binary", b"S" + struct.pack(">I", 2) + b"\xff\xfe"),
    ("A", b"A" + struct.pack(">I", 8) + b"t\x00" + b"S" + struct.pack(">I", 1) + b"x"),
    ("T", b"T" + struct.pack(">Q", 1_700_000_000)),
    ("F", b"F" + table(("inner", b"b\x07"))),
    ("V", b"V"),
    ("x", b"x" + struct.pack(">I", 2) + b"\x00\x01"),
)
EVERY_TYPE_DECODED = {
    "t": True,
    "b": -1,
    "B": 255,
    "s": -2,
    "u": 65534,
    "I": -5,
    "i": 4_000_000_000,
    "l": -(2**40),
    "L": 2**40,
    "f": 1.5,
    "d": 2.25,
    "D": decimal.Decimal("123.45"),
    "S": "abc",
    "S-binary": b"\xff\xfe",
    "A": [False, "x"],
    "T": datetime.datetime.fromtimestamp(1_700_000_000, tz=datetime.UTC),
    "F": {"inner": 7},
    "V": None,
    "x": bytearray(b"\x00\x01"),
}

# content_type, headers (every type), delivery_mode, priority, correlation_id, reply_to, expiration
RAW_EVERY_TYPE = (
    struct.pack(">H", 0x8000 | 0x2000 | 0x1000 | 0x0800 | 0x0400 | 0x0200 | 0x0100)
    + short("application/json")
    + EVERY_TYPE
    + b"\x02"
    + b"\x05"
    + short("corr")
    + short("reply.q")
    + short("60000")
)


def test_accessors_skip_a_table_of_every_field_type():
    assert properties.delivery_mode(RAW_EVERY_TYPE) == 2
    assert properties.expiration(RAW_EVERY_TYPE) == "60000"
    span = properties.headers_span(RAW_EVERY_TYPE)
    assert span is not None
    assert RAW_EVERY_TYPE[span[0] : span[1]] == EVERY_TYPE


def test_every_field_type_decodes_and_validates():
    properties.validate(RAW_EVERY_TYPE)
    assert properties.headers(RAW_EVERY_TYPE) == EVERY_TYPE_DECODED
    decoded = properties.decode_properties(RAW_EVERY_TYPE)
    assert decoded == {
        "content_type": "application/json",
        "headers": EVERY_TYPE_DECODED,
        "delivery_mode": 2,
        "priority": 5,
        "correlation_id": "corr",
        "reply_to": "reply.q",
        "expiration": "60000",
    }


def pamqp_decode(raw: bytes) -> commands.Basic.Properties:
    content_header = header.ContentHeader()
    content_header.unmarshal(struct.pack(">HHQ", 60, 0, 0) + raw)
    return content_header.properties


ALL_PROPERTIES = {
    "content_type": "text/plain",
    "content_encoding": "gzip",
    "headers": {"a": 1, "b": "two", "c": [1, 2], "d": {"e": True}},
    "delivery_mode": 2,
    "priority": 9,
    "correlation_id": "c-1",
    "reply_to": "amq.rabbitmq.reply-to",
    "expiration": "1500",
    "message_id": "m-1",
    "timestamp": datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC),
    "message_type": "event",
    "user_id": "guest",
    "app_id": "tests",
}


def as_decoded(props: dict[str, Any]) -> dict[str, Any]:
    """``props`` as ``decode_properties`` reads them: the timestamp is a plain integer."""
    if "timestamp" not in props:
        return props
    return {**props, "timestamp": int(props["timestamp"].timestamp())}


def property_combinations() -> Iterator[dict[str, Any]]:
    names = list(ALL_PROPERTIES)
    rng = random.Random(7)
    yield {}
    yield dict(ALL_PROPERTIES)
    for name in names:
        yield {name: ALL_PROPERTIES[name]}
    for _ in range(60):
        chosen = rng.sample(names, rng.randrange(1, len(names)))
        yield {name: ALL_PROPERTIES[name] for name in chosen}


@pytest.mark.parametrize(
    "props", list(property_combinations()), ids=lambda p: "+".join(p) or "none"
)
def test_accessors_against_pamqp_encoded_properties(props):
    raw = commands.Basic.Properties(**props).marshal()
    properties.validate(raw)
    assert properties.delivery_mode(raw) == props.get("delivery_mode")
    assert properties.expiration(raw) == props.get("expiration")
    assert properties.headers(raw) == props.get("headers")
    assert properties.decode_properties(raw) == as_decoded(props)
    theirs = pamqp_decode(raw)
    assert {k: v for k, v in theirs if v is not None and v != ""} == props
    if "headers" in props:
        span = properties.headers_span(raw)
        assert span is not None
        start, end = span
        assert raw[start:end] == struct.pack(">I", end - start - 4) + raw[start + 4 : end]
    else:
        assert properties.headers_span(raw) is None


def test_encode_properties_round_trips():
    raw = properties.encode_properties(**ALL_PROPERTIES)
    assert isinstance(raw, bytes)
    assert properties.decode_properties(raw) == as_decoded(ALL_PROPERTIES)
    assert properties.encode_properties(**as_decoded(ALL_PROPERTIES)) == raw
    assert properties.encode_properties() == b"\x00\x00"
    assert properties.encode_properties(delivery_mode=2, content_type=None) == b"\x10\x00\x02"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "shorter than its property flags"),
        (b"\x80", "shorter"),
        (b"\x80\x00\x05ab", "truncated"),
        (b"\x80\x00\x02\xff\xfe", "undecodable"),
        (b"\x00\x01\x00\x00", "unknown property flags"),
        (b"\x00\x02", "unknown property flags"),
        (b"\x10\x00\x02\x00", "1 bytes after the last property"),
        (b"\x10\x00", "truncated"),
        (b"\x20\x00" + table(("k", b"Q")), "unknown field type 0x51"),
        (b"\x20\x00" + table(("k", b"S\x00\x00\x00\x09ab")), "runs past"),
        (b"\x20\x00" + table((b"\xff".decode("latin-1"), b"V")), "undecodable"),
        (b"\x20\x00" + struct.pack(">I", 50) + b"\x01k", "table too long"),
    ],
)
def test_validate_rejects_what_pamqp_cannot_decode(raw, reason):
    with pytest.raises(properties.MalformedPropertiesError, match=reason):
        properties.validate(raw)


def nested_headers(levels: int) -> bytes:
    value = b"V"
    for _ in range(levels):
        value = b"F" + table(("n", value))
    return b"\x20\x00" + table(("n", value))


def test_validate_limits_nesting_depth():
    deepest_allowed = nested_headers(properties.MAX_DEPTH - 1)
    properties.validate(deepest_allowed)
    assert properties.decode_properties(deepest_allowed)["headers"]["n"]["n"]["n"]
    with pytest.raises(properties.MalformedPropertiesError, match="nested too deep"):
        properties.validate(nested_headers(properties.MAX_DEPTH))


@pytest.mark.parametrize("value", [0, 1_700_000_000_123, 253402300800, 2**63, 2**64 - 1])
def test_the_timestamp_property_is_any_64_bit_value_carried_as_is(value):
    """RabbitMQ takes any value and hands it back unchanged; so does Hutch (no year-9999 cap,
    and no guess that a big value means milliseconds)."""
    raw = b"\x00\x40" + struct.pack(">Q", value)
    properties.validate(raw)
    assert properties.decode_properties(raw) == {"timestamp": value}
    assert properties.encode_properties(timestamp=value) == raw


@pytest.mark.parametrize("value", [253402300800 * 1000, 2**63, 2**64 - 1])
def test_a_table_timestamp_past_year_9999_is_carried_as_is(value):
    """pamqp cannot hold it in a datetime; RabbitMQ takes it and shows the integer."""
    tagged = b"T" + struct.pack(">Q", value)
    raw = b"\x20\x00" + table(("t", tagged), ("n", b"F" + table(("t", tagged))))
    properties.validate(raw)

    headers = properties.headers(raw)
    assert headers == {"t": value, "n": {"t": value}}
    assert isinstance(headers["t"], properties.Timestamp)
    assert properties.decode_properties(raw) == {"headers": headers}
    assert properties.encode_properties(headers=headers) == b"\x20\x00" + properties.encode_table(
        headers
    )
    assert b"T" + struct.pack(">Q", value) in properties.encode_properties(headers=headers)


def test_a_table_timestamp_a_datetime_holds_is_still_a_datetime():
    raw = b"\x20\x00" + table(("t", b"T" + struct.pack(">Q", 1_700_000_000)))
    assert properties.headers(raw) == {
        "t": datetime.datetime.fromtimestamp(1_700_000_000, tz=datetime.UTC)
    }


@pytest.mark.parametrize("value", [-1, 2**64])
def test_a_timestamp_outside_64_bits_cannot_be_encoded(value):
    with pytest.raises(ValueError, match="64-bit"):
        properties.encode_properties(timestamp=value)


def test_decode_properties_reports_garbage():
    with pytest.raises(properties.MalformedPropertiesError):
        properties.decode_properties(b"\x80\x00\x02\xff\xfe")
    with pytest.raises(properties.MalformedPropertiesError):
        properties.decode_properties(b"\x00\x01")
    with pytest.raises(properties.MalformedPropertiesError):
        properties.headers(b"\x20\x00" + table(("k", b"Q")))


def test_accessors_read_garbage_as_absent():
    for raw in [b"", b"\x10", b"\x10\x00", b"\x90\x00\x09", b"\x01\x00", b"\xff\xff"]:
        assert properties.delivery_mode(raw) is None
        assert properties.expiration(raw) is None
        assert properties.headers_span(raw) is None


def test_fuzzed_properties_never_crash_accessors_and_validate_implies_decodable():
    rng = random.Random(99)
    seeds = [RAW_EVERY_TYPE, properties.encode_properties(**ALL_PROPERTIES)]
    valid = 0
    for _ in range(3000):
        raw = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(1, 4)):
            position = rng.randrange(len(raw) + 1)
            action = rng.randrange(3)
            if action == 0 and position < len(raw):
                raw[position] = rng.randrange(256)
            elif action == 1:
                del raw[position:]
            else:
                raw[position:position] = rng.randbytes(rng.randrange(1, 5))
        data = bytes(raw)
        properties.delivery_mode(data)
        properties.expiration(data)
        properties.headers_span(data)
        try:
            properties.validate(data)
        except properties.MalformedPropertiesError:
            continue
        valid += 1
        properties.decode_properties(data)  # must not raise once validated
        properties.headers(data)
    assert valid > 50
