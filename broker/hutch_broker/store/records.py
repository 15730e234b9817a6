"""On-disk record formats of the message store: pure encode/decode, no I/O.

Kept apart from the file handling so that the torn-write and bit-flip rules can be read (and
tested) in one place. Everything is little-endian.

Segment file ``msgs.NNNNNNNNNN``::

    file header   b"HMSG" + u32 format version                                     (8 bytes)
    record*       u32 CRC32 of everything after it in the record
                  | u16 magic 0x5248 ("HR") | u16 record version | u32 payload length (12 bytes)
                  payload: u64 msg_id | u64 enqueued_at_ms | u64 expire_at_ms
                           | u8 exchange length | u8 routing-key length
                           | u32 properties length | u64 body length                 (38 bytes)
                           | exchange | routing key | raw properties | body

The lengths sit together in front so that decoding is one ``unpack_from`` plus slices, and the
checksum comes first so that it covers one contiguous range: recovery reads 100k messages in
well under a second. The msg_id is stored in the record (not only implied by its position) so
that compaction can copy a live record, byte for byte, to a newer segment without changing the
id the broker holds.

Ack file ``acks.NNNNNNNNNN``: 8-byte records ``u32 offset | u32 CRC32(offset) ^ ACK_SALT``. The
checksum makes a zero-filled or garbage tail (a power cut after the size grew but before the
data landed) detectable; the salt keeps an all-zero record invalid.

Rules shared by the scanners: a record is served only if its framing is complete, its CRC
matches, its fields fill the payload exactly and its msg_id fits its position. At the first bad
record the segment scan looks ahead for the next valid record that sits at its own msg_id; if
there is one, only the bad bytes are skipped (a flipped bit in the middle of a segment must not
take the confirmed records behind it down too), otherwise the scan ends there and the caller
truncates the file: a torn tail is never served and never resurfaces. Ack files simply stop at
their first bad record.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

SEGMENT_MAGIC = b"HMSG"
FORMAT_VERSION = 1
FILE_HEADER = SEGMENT_MAGIC + struct.pack("<I", FORMAT_VERSION)
FILE_HEADER_SIZE = len(FILE_HEADER)

RECORD_MAGIC = 0x5248
RECORD_VERSION = 1
MAX_PAYLOAD = 0xFFFF_FFFF
MAX_SHORTSTR = 255

_HEADER = struct.Struct("<IHHI")  # crc, magic, version, payload length
_FRAMING = struct.Struct("<HHI")  # the header after the crc: magic, version, payload length
_FIELDS = struct.Struct("<QQQBBIQ")  # msg_id, enqueued, expire-at, the four lengths
_MSG_ID = struct.Struct("<Q")
_ACK = struct.Struct("<II")
_ACK_SALT = 0x48_41_43_4B  # "HACK"
_MARKER = struct.pack("<HH", RECORD_MAGIC, RECORD_VERSION)
_CRC_SIZE = 4

HEADER_SIZE = _HEADER.size
ACK_RECORD_SIZE = _ACK.size

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message as the store keeps it; the broker rebuilds its queue entries from these."""

    msg_id: int  # assigned by the store on append, unique and increasing within a queue store
    enqueued_at_ms: int  # wall clock epoch ms
    expire_at_ms: int  # absolute epoch ms, 0 = never
    exchange: str
    routing_key: str
    raw_properties: bytes  # AMQP content-header bytes from the property-flags field on
    body: bytes


def encode_name(name: str, *, what: str) -> bytes:
    """Encode an exchange name or routing key; surrogatepass so that any str round-trips."""
    encoded = name.encode("utf-8", "surrogatepass")
    if len(encoded) > MAX_SHORTSTR:
        raise ValueError(f"{what} longer than {MAX_SHORTSTR} bytes: {len(encoded)}")
    return encoded


def record_size(*, exchange: bytes, routing_key: bytes, raw_properties: bytes, body: bytes) -> int:
    """Total bytes a record with these (encoded) fields takes in a segment."""
    variable = len(exchange) + len(routing_key) + len(raw_properties) + len(body)
    return HEADER_SIZE + _FIELDS.size + variable


def encode_head(
    *,
    msg_id: int,
    enqueued_at_ms: int,
    expire_at_ms: int,
    exchange: bytes,
    routing_key: bytes,
    raw_properties: bytes,
    body: bytes,
) -> bytes:
    """Everything of a record but the body, which the caller appends unchanged (no copy here)."""
    fields = b"".join(
        (
            _FIELDS.pack(
                msg_id,
                enqueued_at_ms,
                expire_at_ms,
                len(exchange),
                len(routing_key),
                len(raw_properties),
                len(body),
            ),
            exchange,
            routing_key,
            raw_properties,
        )
    )
    payload_length = len(fields) + len(body)
    if payload_length > MAX_PAYLOAD:
        raise ValueError(f"message too large for one record: {payload_length} bytes")
    framing = _FRAMING.pack(RECORD_MAGIC, RECORD_VERSION, payload_length)
    crc = zlib.crc32(body, zlib.crc32(fields, zlib.crc32(framing)))
    return b"".join((crc.to_bytes(4, "little"), framing, fields))


def framed_length(data: Buffer, offset: int) -> int | None:
    """Length of the record at ``offset`` if its header is plausible and complete, else None."""
    if offset + HEADER_SIZE > len(data):
        return None
    _, magic, version, payload_length = _HEADER.unpack_from(data, offset)
    if magic != RECORD_MAGIC or version != RECORD_VERSION or payload_length < _FIELDS.size:
        return None
    length = HEADER_SIZE + int(payload_length)
    return length if offset + length <= len(data) else None


def _checked_length(data: Buffer, offset: int, view: memoryview) -> int | None:
    length = framed_length(data, offset)
    if length is None:
        return None
    crc = zlib.crc32(view[offset + _CRC_SIZE : offset + length])
    return length if crc == _HEADER.unpack_from(data, offset)[0] else None


def decode_record(
    data: Buffer, offset: int, view: memoryview | None = None
) -> StoredMessage | None:
    """The record at ``offset``, or None when it is torn, corrupt or inconsistent.

    ``view``, a memoryview of ``data``, saves creating one per record when scanning.
    """
    decoded = _decode(data, offset, memoryview(data) if view is None else view)
    return None if decoded is None else decoded[0]


def _decode(data: Buffer, offset: int, view: memoryview) -> tuple[StoredMessage, int] | None:
    """The record at ``offset`` and its end; the recovery hot path, hence in one piece."""
    start = offset + HEADER_SIZE
    if start > len(data):
        return None
    crc, magic, version, payload_length = _HEADER.unpack_from(data, offset)
    end = start + payload_length
    if (
        magic != RECORD_MAGIC
        or version != RECORD_VERSION
        or payload_length < _FIELDS.size
        or end > len(data)
        or zlib.crc32(view[offset + _CRC_SIZE : end]) != crc
    ):
        return None
    msg_id, enqueued, expire_at, exchange_length, key_length, properties_length, body_length = (
        _FIELDS.unpack_from(data, start)
    )
    key_start = start + _FIELDS.size + exchange_length
    properties_start = key_start + key_length
    body_start = properties_start + properties_length
    if body_start + body_length != end:
        return None
    message = StoredMessage(
        msg_id,
        enqueued,
        expire_at,
        bytes(data[start + _FIELDS.size : key_start]).decode("utf-8", "surrogatepass"),
        bytes(data[key_start:properties_start]).decode("utf-8", "surrogatepass"),
        bytes(data[properties_start:body_start]),
        bytes(data[body_start:end]),
    )
    return message, end


def checked_msg_id(data: Buffer, offset: int) -> int | None:
    """The msg_id of the record at ``offset`` if its checksum holds, without decoding it."""
    if _checked_length(data, offset, memoryview(data)) is None:
        return None
    return int(_MSG_ID.unpack_from(data, offset + HEADER_SIZE)[0])


@dataclass(frozen=True, slots=True)
class SegmentScan:
    records: list[tuple[int, int, StoredMessage]]  # (offset, length, message) in file order
    skipped: list[int]  # offsets where corrupt bytes began that valid records follow
    valid_end: int  # where the file must be truncated to drop a torn or corrupt tail


def scan_segment(data: bytes, *, number: int, start: int = FILE_HEADER_SIZE) -> SegmentScan:
    """Every valid record of segment ``number``'s file bytes, in file order."""
    view = memoryview(data)
    records: list[tuple[int, int, StoredMessage]] = []
    skipped: list[int] = []
    base_id = number << 32
    pos = start
    while pos < len(data):
        decoded = _decode(data, pos, view)
        if decoded is not None and _plausible_id(decoded[0].msg_id, base_id, pos):
            message, end = decoded
            records.append((pos, end - pos, message))
            pos = end
            continue
        resume = _resync(data, pos + 1, base_id, view)
        if resume is None:
            break
        skipped.append(pos)
        pos = resume
    return SegmentScan(records=records, skipped=skipped, valid_end=pos)


def _plausible_id(msg_id: int, base_id: int, offset: int) -> bool:
    """A record's own position, or a compaction copy of a record from an older segment."""
    return msg_id == base_id | offset or (1 << 32) <= msg_id < base_id


def _resync(data: bytes, start: int, base_id: int, view: memoryview) -> int | None:
    """The next original (not copied) valid record after corrupt bytes, if there is one.

    Only originals qualify: their msg_id must equal their position, which bytes that merely
    look like a record (inside a body, or stale blocks after a power cut) practically never do.
    """
    found = data.find(_MARKER, start + _CRC_SIZE)
    while found >= 0:
        candidate = found - _CRC_SIZE
        message = decode_record(data, candidate, view)
        if message is not None and message.msg_id == base_id | candidate:
            return candidate
        found = data.find(_MARKER, found + 1)
    return None


def encode_ack(offset: int) -> bytes:
    return _ACK.pack(offset, _ack_check(offset))


def _ack_check(offset: int) -> int:
    return zlib.crc32(offset.to_bytes(4, "little")) ^ _ACK_SALT


def scan_acks(data: bytes) -> tuple[list[int], int]:
    """Acked offsets in an ack file's bytes, and where its valid part ends."""
    offsets: list[int] = []
    pos = 0
    while pos + ACK_RECORD_SIZE <= len(data):
        offset, check = _ACK.unpack_from(data, pos)
        if check != _ack_check(offset):
            break
        offsets.append(offset)
        pos += ACK_RECORD_SIZE
    return offsets, pos
