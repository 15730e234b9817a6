"""Basic.Properties kept as raw bytes, read lazily (IMPL-1, IMPL-2).

A message's content header is forwarded to consumers byte for byte: re-encoding through pamqp
changes wire types (``l`` 1 becomes ``b``, ``d`` becomes ``f``) and fails on non-UTF-8 ``S``
values.  So the broker keeps ``raw`` (the header from the property flags on) and reads from it:

- ``delivery_mode``, ``expiration``, ``headers_span``: hot-path accessors that read the flags and
  skip fields with ``struct`` without building any object.  They never raise; malformed input
  reads as "absent" (None).
- ``validate``: the structural check the frame parser runs once per publish, so that everything
  downstream may assume ``decode_properties`` succeeds.  Strict about what pamqp could not decode
  (bad UTF-8 in short strings or table keys, unknown field types, trailing bytes, nesting deeper
  than ``MAX_DEPTH``).
- ``decode_properties`` / ``headers``: full decode through pamqp, for the rare paths that need
  values (headers exchange, dead-lettering, management API).  Timestamps are the exception, as
  RabbitMQ takes any 64-bit value and hands it back: the ``timestamp`` property is read and
  written as a plain integer (pamqp would read values above 2**32 as milliseconds and fail past
  year 9999), and a table timestamp pamqp cannot hold in a datetime is a ``Timestamp``, an
  integer that is encoded back as a timestamp (``decode_table``).
- ``encode_properties``: pamqp's encoder, for messages the broker makes itself, except for
  field-table keys: pamqp cuts keys longer than 128 bytes (a warning in the log), so tables are
  encoded here and a key is either carried whole (up to a shortstr's 255 bytes) or refused.

Property order and flag bits (AMQP 0-9-1 basic class; bit 0 of a flag word means "another flag
word follows", bit 1 is reserved)::

    15 content_type  14 content_encoding  13 headers  12 delivery_mode  11 priority
    10 correlation_id  9 reply_to  8 expiration  7 message_id  6 timestamp  5 message_type
     4 user_id  3 app_id  2 cluster_id
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any

from pamqp import commands, common, decode, encode

# Wire types of the properties, as used in FIELDS (rewrite.py relies on these numbers).
SHORTSTR, OCTET, TABLE, TIMESTAMP = 0, 1, 2, 3

# (name as pamqp spells it, flag bit, wire type), in wire order.
FIELDS: tuple[tuple[str, int, int], ...] = (
    ("content_type", 0x8000, SHORTSTR),
    ("content_encoding", 0x4000, SHORTSTR),
    ("headers", 0x2000, TABLE),
    ("delivery_mode", 0x1000, OCTET),
    ("priority", 0x0800, OCTET),
    ("correlation_id", 0x0400, SHORTSTR),
    ("reply_to", 0x0200, SHORTSTR),
    ("expiration", 0x0100, SHORTSTR),
    ("message_id", 0x0080, SHORTSTR),
    ("timestamp", 0x0040, TIMESTAMP),
    ("message_type", 0x0020, SHORTSTR),
    ("user_id", 0x0010, SHORTSTR),
    ("app_id", 0x0008, SHORTSTR),
    ("cluster_id", 0x0004, SHORTSTR),
)
_FLAG_CONTENT_TYPE = 0x8000
_FLAG_CONTENT_ENCODING = 0x4000
_FLAG_HEADERS = 0x2000
_FLAG_DELIVERY_MODE = 0x1000
_FLAG_PRIORITY = 0x0800
_FLAG_CORRELATION_ID = 0x0400
_FLAG_REPLY_TO = 0x0200
_FLAG_EXPIRATION = 0x0100
_NOT_A_PROPERTY = 0x0003  # continuation + reserved: never used for the 14 basic properties

MAX_DEPTH = 64  # nested tables/arrays; pamqp recurses twice per level
MAX_TIMESTAMP = 2**64 - 1  # timestamps are any 64-bit value, as in RabbitMQ
_UINT32 = struct.Struct(">I")
_UINT64 = struct.Struct(">Q")

# Field-table value sizes for the fixed-width types pamqp decodes (RabbitMQ's errata set + 'L').
_FIXED_WIDTH: dict[int, int] = {
    ord("t"): 1,
    ord("b"): 1,
    ord("B"): 1,
    ord("s"): 2,
    ord("u"): 2,
    ord("I"): 4,
    ord("i"): 4,
    ord("l"): 8,
    ord("L"): 8,
    ord("f"): 4,
    ord("d"): 8,
    ord("D"): 5,
    ord("V"): 0,
    0: 0,
}
FIXED_WIDTH = _FIXED_WIDTH  # public: protocol.rewrite walks header tables with the same sizes
_LONG_STRING = (ord("S"), ord("x"))
_TABLE_TAG, _ARRAY_TAG, _TIMESTAMP_TAG = ord("F"), ord("A"), ord("T")


# flags -> wire types of the present properties, so validation loops over those only.
_KINDS_BY_FLAGS: dict[int, tuple[int, ...]] = {}


class MalformedPropertiesError(ValueError):
    """The raw properties cannot be decoded (or fail ``validate``)."""


class Timestamp(int):
    """A field-table timestamp ('T') past what a datetime holds (year 9999): the 64-bit value as
    sent, so it is shown as that integer and encoded back as a 'T', unchanged."""


# -- hot-path accessors ---------------------------------------------------------------------


def _flags(raw: bytes) -> int:
    return (raw[0] << 8) | raw[1] if len(raw) >= 2 else 0


def _after_headers(raw: bytes, flags: int) -> int:
    """Offset just past content_type, content_encoding and headers (whichever are present)."""
    offset = 2
    if flags & _FLAG_CONTENT_TYPE:
        offset += 1 + raw[offset]
    if flags & _FLAG_CONTENT_ENCODING:
        offset += 1 + raw[offset]
    if flags & _FLAG_HEADERS:
        offset += 4 + _UINT32.unpack_from(raw, offset)[0]
    return offset


def delivery_mode(raw: bytes) -> int | None:
    """1 (transient), 2 (persistent) or None when the property is absent."""
    flags = _flags(raw)
    if not flags & _FLAG_DELIVERY_MODE or flags & 1:
        return None
    try:
        return raw[_after_headers(raw, flags)]
    except (IndexError, struct.error):
        return None


def priority(raw: bytes) -> int:
    """The message priority (0-255); 0 when absent, as RabbitMQ treats a message without one."""
    flags = _flags(raw)
    if not flags & _FLAG_PRIORITY or flags & 1:
        return 0
    try:
        return raw[_after_headers(raw, flags) + ((flags & _FLAG_DELIVERY_MODE) and 1)]
    except (IndexError, struct.error):
        return 0


# The expiration's presence flag (0x0100 of the 16-bit property flags), in the first byte:
# ``Message.expires`` reads it, once per message, before any ``expiration()`` parse.
EXPIRATION_FLAG = 0x01


def expiration(raw: bytes) -> str | None:
    """The per-message TTL string as sent (validated later by the model), or None."""
    flags = _flags(raw)
    if not flags & _FLAG_EXPIRATION or flags & 1:
        return None
    try:
        offset = _after_headers(raw, flags)
        offset += (flags & _FLAG_DELIVERY_MODE) and 1
        offset += (flags & _FLAG_PRIORITY) and 1
        if flags & _FLAG_CORRELATION_ID:
            offset += 1 + raw[offset]
        if flags & _FLAG_REPLY_TO:
            offset += 1 + raw[offset]
        length = raw[offset]
        value = raw[offset + 1 : offset + 1 + length]
        return value.decode("utf-8") if len(value) == length else None
    except (IndexError, UnicodeDecodeError, struct.error):
        return None


def headers_span(raw: bytes) -> tuple[int, int] | None:
    """(start, end) of the headers table in ``raw``, length prefix included, or None."""
    flags = _flags(raw)
    if not flags & _FLAG_HEADERS or flags & 1:
        return None
    try:
        offset = 2
        if flags & _FLAG_CONTENT_TYPE:
            offset += 1 + raw[offset]
        if flags & _FLAG_CONTENT_ENCODING:
            offset += 1 + raw[offset]
        end = offset + 4 + _UINT32.unpack_from(raw, offset)[0]
    except (IndexError, struct.error):
        return None
    return (offset, end) if end <= len(raw) else None


# -- full decode ----------------------------------------------------------------------------


def headers(raw: bytes) -> common.FieldTable | None:
    """The headers table decoded (only that field), or None when absent."""
    span = headers_span(raw)
    if span is None:
        return None
    return decode_table(raw[span[0] : span[1]])


def decode_table(table: bytes) -> common.FieldTable:
    """A field table (length prefix included) as pamqp decodes it, but a timestamp pamqp cannot
    turn into a datetime is a ``Timestamp`` instead of an error.  pamqp decodes the common case;
    only a table it fails on is walked here."""
    with contextlib.suppress(Exception):  # pamqp lets stdlib errors through: walked below
        return decode.field_table(table)[1]
    try:
        end = 4 + _UINT32.unpack_from(table, 0)[0]
        return _walk_table(table, 4, end, 1)
    except Exception as exc:  # pamqp lets stdlib errors through on garbage
        raise MalformedPropertiesError("cannot decode the headers table") from exc


def _walk_table(raw: bytes, offset: int, end: int, depth: int) -> dict[str, Any]:
    if end > len(raw) or depth > MAX_DEPTH:
        raise MalformedPropertiesError("table too long or nested too deep")
    result: dict[str, Any] = {}
    while offset < end:
        key_end = offset + 1 + raw[offset]
        key = raw[offset + 1 : key_end].decode("utf-8")
        result[key], offset = _walk_value(raw, key_end, depth)
    return result


def _walk_value(raw: bytes, offset: int, depth: int) -> tuple[Any, int]:
    """(value, offset after it) of the tagged value at ``offset``."""
    tag = raw[offset]
    if tag == _TIMESTAMP_TAG:
        try:
            return decode.timestamp(raw[offset + 1 : offset + 9])[1], offset + 9
        except (ValueError, OverflowError, OSError):  # past year 9999
            return Timestamp(_UINT64.unpack_from(raw, offset + 1)[0]), offset + 9
    if tag in (_TABLE_TAG, _ARRAY_TAG):
        end = offset + 5 + _UINT32.unpack_from(raw, offset + 1)[0]
        if tag == _TABLE_TAG:
            return _walk_table(raw, offset + 5, end, depth + 1), end
        items, position = [], offset + 5
        while position < end:
            item, position = _walk_value(raw, position, depth + 1)
            items.append(item)
        return items, end
    width = _FIXED_WIDTH.get(tag)
    end = offset + 1 + (width if width is not None else 4 + _UINT32.unpack_from(raw, offset + 1)[0])
    return decode.embedded_value(raw[offset:end])[1], end


def decode_properties(raw: bytes) -> dict[str, Any]:
    """Every present property by pamqp's name (``message_type`` is AMQP's ``type``)."""
    if len(raw) < 2:
        raise MalformedPropertiesError("content header shorter than its property flags")
    flags = _flags(raw)
    if flags & 1:
        raise MalformedPropertiesError("more than one property flag word")
    result: dict[str, Any] = {}
    data = raw[2:]
    try:
        for name, bit, kind in FIELDS:
            if not flags & bit:
                continue
            if kind == TIMESTAMP:
                consumed, result[name] = 8, _UINT64.unpack_from(data)[0]
            elif kind == TABLE:
                consumed = 4 + _UINT32.unpack_from(data)[0]
                result[name] = decode_table(data[:consumed])
            else:
                consumed, result[name] = decode.by_type(
                    data, commands.Basic.Properties.amqp_type(name)
                )
            data = data[consumed:]
    except Exception as exc:  # pamqp lets stdlib errors through on garbage
        raise MalformedPropertiesError(f"cannot decode property {name}") from exc
    return result


class _Properties(commands.Basic.Properties):
    """pamqp's properties with ``encode_table`` for the headers and the timestamp as an integer."""

    def encode_property(self, name: str, value: common.FieldValue) -> bytes:
        if name == "headers" and isinstance(value, dict):
            return encode_table(value)
        if name == "timestamp" and isinstance(value, int):
            if not 0 <= value <= MAX_TIMESTAMP:
                raise ValueError(f"timestamp {value} is not a 64-bit unsigned integer")
            return _UINT64.pack(value)
        return super().encode_property(name, value)


def encode_properties(**props: Any) -> bytes:
    """Raw properties for a broker-made message, e.g. ``encode_properties(delivery_mode=2)``.

    Keyword names as in ``decode_properties``; None values are left out; ``timestamp`` is an
    integer (a datetime works too).  Raises pamqp's ``TypeError`` / ``ValueError`` for values it
    cannot encode.
    """
    return bytes(_Properties(**props).marshal())


def encode_table(table: dict[str, Any]) -> bytes:
    """A field table as pamqp encodes it (keys sorted), but a key over 255 bytes is a
    ``ValueError`` instead of being cut to 128 bytes."""
    parts: list[bytes] = []
    for key, value in sorted(table.items()):
        raw_key = key.encode("utf-8")
        if len(raw_key) > 255:
            raise ValueError(f"field table key longer than 255 bytes: {key[:32]!r}...")
        parts += (bytes((len(raw_key),)), raw_key, _encode_value(value))
    body = b"".join(parts)
    return _UINT32.pack(len(body)) + body


def _encode_value(value: Any) -> bytes:
    if isinstance(value, Timestamp):
        return b"T" + _UINT64.pack(value)
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if isinstance(value, list):
        body = b"".join(_encode_value(item) for item in value)
        return b"A" + _UINT32.pack(len(body)) + body
    return encode.encode_table_value(value)


# -- validation -----------------------------------------------------------------------------


def validate(raw: bytes) -> None:
    """Raise ``MalformedPropertiesError`` unless ``decode_properties(raw)`` is certain to work
    and nothing trails the last property."""
    try:
        end = _check_properties(raw)
    except (IndexError, struct.error, UnicodeDecodeError, RecursionError) as exc:
        raise MalformedPropertiesError("truncated or undecodable properties") from exc
    if end != len(raw):
        raise MalformedPropertiesError(f"{len(raw) - end} bytes after the last property")


def _check_properties(raw: bytes) -> int:
    if len(raw) < 2:
        raise MalformedPropertiesError("content header shorter than its property flags")
    flags = _flags(raw)
    if flags & _NOT_A_PROPERTY:
        raise MalformedPropertiesError(f"unknown property flags {flags & _NOT_A_PROPERTY:#x}")
    offset, size = 2, len(raw)
    kinds = _KINDS_BY_FLAGS.get(flags)
    if kinds is None:
        kinds = _KINDS_BY_FLAGS[flags] = tuple(kind for _, bit, kind in FIELDS if flags & bit)
    for kind in kinds:
        if kind == SHORTSTR:
            end = offset + 1 + raw[offset]
            raw[offset + 1 : end].decode("utf-8")
        elif kind == OCTET:
            end = offset + 1
        elif kind == TABLE:
            end = offset + 4 + _UINT32.unpack_from(raw, offset)[0]
            _check_table(raw, offset + 4, end, 1)
        else:  # the timestamp property: any 64-bit value
            end = offset + 8
        if end > size:
            raise IndexError("property runs past the end")
        offset = end
    return offset


def _check_table(raw: bytes, offset: int, end: int, depth: int) -> None:
    if end > len(raw) or depth > MAX_DEPTH:
        raise MalformedPropertiesError("table too long or nested too deep")
    while offset < end:
        key_end = offset + 1 + raw[offset]
        if key_end > end:
            raise MalformedPropertiesError("table key runs past the table")
        raw[offset + 1 : key_end].decode("utf-8")
        offset = _check_value(raw, key_end, end, depth)


def _check_array(raw: bytes, offset: int, end: int, depth: int) -> None:
    if end > len(raw) or depth > MAX_DEPTH:
        raise MalformedPropertiesError("array too long or nested too deep")
    while offset < end:
        offset = _check_value(raw, offset, end, depth)


def _check_value(raw: bytes, offset: int, end: int, depth: int) -> int:
    """Offset after the tagged value at ``offset``; it must end within ``end``."""
    tag = raw[offset]
    offset += 1
    width = _FIXED_WIDTH.get(tag)
    if width is not None:
        value_end = offset + width
    elif tag in _LONG_STRING:
        value_end = offset + 4 + _UINT32.unpack_from(raw, offset)[0]
    elif tag == _TABLE_TAG:
        value_end = offset + 4 + _UINT32.unpack_from(raw, offset)[0]
        _check_table(raw, offset + 4, value_end, depth + 1)
    elif tag == _ARRAY_TAG:
        value_end = offset + 4 + _UINT32.unpack_from(raw, offset)[0]
        _check_array(raw, offset + 4, value_end, depth + 1)
    elif tag == _TIMESTAMP_TAG:  # any 64-bit value, as in RabbitMQ
        value_end = offset + 8
    else:
        raise MalformedPropertiesError(f"unknown field type {tag:#04x}")
    if value_end > end:
        raise MalformedPropertiesError("field value runs past its table")
    return value_end
