"""On-disk format of the definitions journal: pure encode/scan, no I/O.

Kept apart from the file handling (``definitions``) so that the torn-tail rule can be read and
tested in one place. Everything is little-endian; the record header has the same layout as the
message store's (``records``), with its own magic, so a stray message record never parses here.

File ``definitions.log``::

    file header   b"HDEF" + u32 format version                                     (8 bytes)
    record*       u32 CRC32 of everything after it in the record
                  | u16 magic 0x4452 ("RD") | u16 record version | u32 payload length (12 bytes)
                  | payload: one JSON object, UTF-8 (``definitions`` says which)

A journal is only ever appended to, so the first record that is incomplete or fails its checksum
ends it: everything before it is replayed, nothing after it. When no valid record follows the bad
one, that is the torn tail of a write a crash interrupted (a change that was never acknowledged);
when one does, the file was damaged in place, which the scan reports separately so that recovery
can say so loudly and keep a copy of the evidence.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from hutch_broker.store import errors

JOURNAL_MAGIC = b"HDEF"
FORMAT_VERSION = 1
FILE_HEADER = JOURNAL_MAGIC + struct.pack("<I", FORMAT_VERSION)
FILE_HEADER_SIZE = len(FILE_HEADER)

RECORD_MAGIC = 0x4452
RECORD_VERSION = 1
MAX_PAYLOAD = 0xFFFF_FFFF

_HEADER = struct.Struct("<IHHI")  # crc, magic, version, payload length
_FRAMING = struct.Struct("<HHI")  # the header after the crc
_MARKER = struct.pack("<HH", RECORD_MAGIC, RECORD_VERSION)
_CRC_SIZE = 4
HEADER_SIZE = _HEADER.size


def encode_record(payload: bytes) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"journal record too large: {len(payload)} bytes")
    framing = _FRAMING.pack(RECORD_MAGIC, RECORD_VERSION, len(payload))
    crc = zlib.crc32(payload, zlib.crc32(framing))
    return b"".join((crc.to_bytes(4, "little"), framing, payload))


def decode_record(data: bytes, offset: int) -> tuple[bytes, int] | None:
    """The payload of the record at ``offset`` and where it ends; None if torn or corrupt."""
    start = offset + HEADER_SIZE
    if start > len(data):
        return None
    crc, magic, version, length = _HEADER.unpack_from(data, offset)
    end = start + length
    if magic != RECORD_MAGIC or version != RECORD_VERSION or end > len(data):
        return None
    if zlib.crc32(memoryview(data)[offset + _CRC_SIZE : end]) != crc:
        return None
    return data[start:end], end


@dataclass(frozen=True, slots=True)
class JournalScan:
    payloads: list[bytes]  # every record before the first bad one, in file order
    valid_end: int  # where the file must be truncated so appends never follow garbage
    damaged: bool  # a valid record follows the bad one: damage in place, not a torn tail


def scan(data: bytes, *, name: str = "journal") -> JournalScan:
    """The records of a journal file's bytes; an empty file is an empty journal."""
    if not data:
        return JournalScan(payloads=[], valid_end=0, damaged=False)
    _check_header(data, name)
    payloads: list[bytes] = []
    pos = FILE_HEADER_SIZE
    while pos < len(data):
        decoded = decode_record(data, pos)
        if decoded is None:
            return JournalScan(payloads, valid_end=pos, damaged=_valid_record_after(data, pos))
        payload, pos = decoded
        payloads.append(payload)
    return JournalScan(payloads, valid_end=pos, damaged=False)


def _check_header(data: bytes, name: str) -> None:
    header = data[:FILE_HEADER_SIZE]
    if header == FILE_HEADER:
        return
    if header.startswith(JOURNAL_MAGIC):
        raise errors.UnsupportedFormatError(f"{name}: unknown journal format {header[4:]!r}")
    # Written whole by a rename: a bad header is damage, and guessing would lose definitions.
    raise errors.CorruptDefinitionsError(f"{name}: not a definitions journal")


def looks_torn(data: bytes, offset: int) -> bool:
    """Whether the bytes from ``offset`` on look like an interrupted append (zeros, a partial
    header, a record running past the end) rather than a damaged, complete record."""
    if not data[offset:].strip(b"\0") or offset + HEADER_SIZE > len(data):
        return True
    _, magic, version, length = _HEADER.unpack_from(data, offset)
    complete = offset + HEADER_SIZE + length <= len(data)
    return magic == RECORD_MAGIC and version == RECORD_VERSION and not complete


def _valid_record_after(data: bytes, bad: int) -> bool:
    found = data.find(_MARKER, bad + 1 + _CRC_SIZE)
    while found >= 0:
        if decode_record(data, found - _CRC_SIZE) is not None:
            return True
        found = data.find(_MARKER, found + 1)
    return False
