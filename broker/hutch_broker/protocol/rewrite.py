"""Targeted edits of raw content headers (IMPL-2, IMPL-3).

The broker changes a message in very few places (BCC stripping,
dead-lettering, HTTP publish).  Re-encoding a whole header through pamqp
would change wire types the publisher chose (``l`` 1 becomes ``b``) and fail
on non-UTF-8 strings, so edits work on spans: the properties and the headers
table are split into raw pieces, only the affected pieces are rewritten, and
everything else is copied byte for byte.  Values the broker writes itself
use a small typed encoder with fixed choices: integers as ``l`` (signed
64-bit, which the Java client casts to Long), strings as ``S``, timestamps as
``T``, lists as ``A`` and dicts as ``F``.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

from hutch_broker.protocol import properties

_U32 = struct.Struct(">I")
# Value sizes of the fixed-width field types, plus 'T' (timestamp), shared with properties.
_FIXED: dict[int, int] = {**properties.FIXED_WIDTH, ord("T"): 8}
_LENGTH_PREFIXED = frozenset(ord(tag) for tag in "SxAF")


# -- splitting ---------------------------------------------------------------


def property_spans(raw: bytes) -> dict[str, bytes]:
    """Each present property's raw bytes (no flags), keyed by pamqp's name."""
    flags = struct.unpack_from(">H", raw, 0)[0]
    spans: dict[str, bytes] = {}
    offset = 2
    for name, bit, kind in properties.FIELDS:
        if not flags & bit:
            continue
        if kind == 0:  # short string
            end = offset + 1 + raw[offset]
        elif kind == 1:  # octet
            end = offset + 1
        elif kind == 2:  # table
            end = offset + 4 + _U32.unpack_from(raw, offset)[0]
        else:  # timestamp
            end = offset + 8
        spans[name] = raw[offset:end]
        offset = end
    return spans


def join_properties(spans: dict[str, bytes]) -> bytes:
    flags = 0
    parts = []
    for name, bit, _ in properties.FIELDS:
        value = spans.get(name)
        if value is not None:
            flags |= bit
            parts.append(value)
    return struct.pack(">H", flags) + b"".join(parts)


def _value_end(raw: bytes, offset: int) -> int:
    tag = raw[offset]
    width = _FIXED.get(tag)
    if width is not None:
        return offset + 1 + width
    if tag in _LENGTH_PREFIXED:
        length: int = _U32.unpack_from(raw, offset + 1)[0]
        return offset + 5 + length
    raise ValueError(f"unknown field type {tag:#04x}")


def split_table(table: bytes) -> list[tuple[str, bytes]]:
    """(key, tagged raw value) pairs of a field table given with its length prefix."""
    end = 4 + _U32.unpack_from(table, 0)[0]
    entries = []
    offset = 4
    while offset < end:
        key_end = offset + 1 + table[offset]
        key = table[offset + 1 : key_end].decode("utf-8")
        value_end = _value_end(table, key_end)
        entries.append((key, table[key_end:value_end]))
        offset = value_end
    return entries


def join_table(entries: list[tuple[str, bytes]]) -> bytes:
    body = b"".join(_shortstr(key) + value for key, value in entries)
    return _U32.pack(len(body)) + body


def decode_value(tagged: bytes) -> Any:
    """Decode one tagged value (as produced by ``split_table``) with pamqp."""
    key = b"\x01v"
    table = _U32.pack(len(key) + len(tagged)) + key + tagged
    return properties.decode_table(table)["v"]


# -- typed encoder -------------------------------------------------------------


def _shortstr(text: str) -> bytes:
    data = text.encode("utf-8")
    return bytes([len(data)]) + data


def encode_value(value: Any) -> bytes:
    """One tagged value with the broker's fixed type choices (IMPL-3)."""
    if isinstance(value, bool):
        return b"t" + (b"\x01" if value else b"\x00")
    if isinstance(value, properties.Timestamp):  # a publisher's, past year 9999: as it came
        return b"T" + struct.pack(">Q", value)
    if isinstance(value, int):
        return b"l" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"d" + struct.pack(">d", value)
    if isinstance(value, str):
        data = value.encode("utf-8")
        return b"S" + _U32.pack(len(data)) + data
    if isinstance(value, bytes):
        return b"x" + _U32.pack(len(value)) + value
    if isinstance(value, datetime.datetime):
        return b"T" + struct.pack(">Q", int(value.timestamp()))
    if isinstance(value, list | tuple):
        body = b"".join(encode_value(item) for item in value)
        return b"A" + _U32.pack(len(body)) + body
    if isinstance(value, dict):
        return b"F" + join_table([(str(k), encode_value(v)) for k, v in value.items()])
    if value is None:
        return b"V"
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


# -- edits ---------------------------------------------------------------------


def edit_headers(
    raw: bytes,
    *,
    set_values: dict[str, bytes] | None = None,
    remove: tuple[str, ...] = (),
    drop_properties: tuple[str, ...] = (),
) -> bytes:
    """Rewrite only the named header entries (tagged raw values) and drop properties."""
    spans = property_spans(raw)
    entries = split_table(spans["headers"]) if "headers" in spans else []
    updates = dict(set_values or {})
    kept = [(key, value) for key, value in entries if key not in remove and key not in updates]
    # New and updated entries go first, as RabbitMQ prepends x-death & co.
    spans["headers"] = join_table([*updates.items(), *kept])
    for name in drop_properties:
        spans.pop(name, None)
    return join_properties(spans)


def header_value(raw: bytes, key: str) -> bytes | None:
    """The tagged raw value of one header entry, or None."""
    spans = property_spans(raw)
    if "headers" not in spans:
        return None
    for name, value in split_table(spans["headers"]):
        if name == key:
            return value
    return None


_MESSAGE_ID_BIT = 0x0080


def has_message_id(raw: bytes) -> bool:
    """Flag bit 7 of the 16-bit property flags, i.e. the high bit of the second byte."""
    return len(raw) >= 2 and bool(raw[1] & _MESSAGE_ID_BIT)


def with_message_id(raw: bytes, message_id: str) -> bytes:
    """``raw`` with a ``message_id`` property added (the publisher gave none).

    On the publish path for every such message, so it skips the eight fields
    before ``message_id`` by hand instead of splitting every property.
    """
    flags = raw[0] << 8 | raw[1]
    offset = 2
    if flags & 0x8000:  # content_type
        offset += 1 + raw[offset]
    if flags & 0x4000:  # content_encoding
        offset += 1 + raw[offset]
    if flags & 0x2000:  # headers
        offset += 4 + int.from_bytes(raw[offset : offset + 4], "big")
    if flags & 0x1000:  # delivery_mode
        offset += 1
    if flags & 0x0800:  # priority
        offset += 1
    for bit in (0x0400, 0x0200, 0x0100):  # correlation_id, reply_to, expiration
        if flags & bit:
            offset += 1 + raw[offset]
    flags |= _MESSAGE_ID_BIT
    encoded = message_id.encode("utf-8")
    return b"".join(
        (
            bytes((flags >> 8, flags & 0xFF)),
            raw[2:offset],
            bytes((len(encoded),)),
            encoded,
            raw[offset:],
        )
    )
