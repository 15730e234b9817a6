"""Rebuilding one queue log from its directory, after a clean stop or a crash.

This is where "nothing confirmed is lost, nothing corrupt is served" is enforced on the read
side. Every segment is scanned in full and checked record by record (``records.scan_segment``);
a torn or corrupt tail is truncated away so it can never resurface; acks are read back with the
same torn-tail rule. A lost ack record only brings a message back (a redelivery), never loses
one.

Compaction copies live records to a newer segment before the old one is unlinked, so a crash in
between leaves two copies of a record under the same msg_id. The newest copy (the highest
position) decides: acks always go to the newest copy, because compaction only copies live
records and redirects later acks to the copy. If the newest copy is live the message is live
and every older copy gets an ack record (so the old segment drains and is deleted normally; an
ack on an older copy therefore means nothing); if it is acked, the message is gone. A copy that
never became durable simply is not there, and the older one, still unacked, serves.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from hutch_broker.store import errors, records, segments
from hutch_broker.store.records import StoredMessage
from hutch_broker.store.segments import Segment

log = logging.getLogger(__name__)


@dataclass
class RecoveredLog:
    segments: dict[int, Segment]  # every segment file found, sealed, some possibly empty
    moved: dict[int, int]  # msg_id -> position, for records that compaction copied
    messages: list[StoredMessage]  # live messages in msg_id (= append) order
    next_number: int  # the first segment number never used in this directory


@dataclass
class _Scan:
    segments: dict[int, Segment] = field(default_factory=dict)
    live: dict[int, StoredMessage] = field(default_factory=dict)  # position -> message
    acked: set[int] = field(default_factory=set)  # positions of records acked on disk
    copies: dict[int, list[int]] = field(default_factory=dict)  # msg_id -> copy positions


def recover_directory(directory: Path) -> RecoveredLog:
    """Scan, repair and index every segment in ``directory``."""
    segment_numbers, ack_numbers = _list_numbers(directory)
    for orphan in sorted(ack_numbers - segment_numbers):
        # the segment went first (``Segment.unlink``); its acks mean nothing any more
        (directory / segments.ack_name(orphan)).unlink(missing_ok=True)
    scan = _Scan()
    for number in sorted(segment_numbers):
        _scan_one(directory, number, scan)
    _resolve_copies(scan)
    messages = list(scan.live.values())
    if scan.copies:
        messages.sort(key=lambda message: message.msg_id)
    moved = {message.msg_id: pos for pos, message in scan.live.items() if message.msg_id != pos}
    return RecoveredLog(
        segments=scan.segments,
        moved=moved,
        messages=messages,
        next_number=max(segment_numbers | ack_numbers, default=0) + 1,
    )


def _list_numbers(directory: Path) -> tuple[set[int], set[int]]:
    segment_numbers: set[int] = set()
    ack_numbers: set[int] = set()
    for entry in os.scandir(directory):
        number = segments.parse_number(entry.name, segments.SEGMENT_PREFIX)
        if number is not None:
            segment_numbers.add(number)
        number = segments.parse_number(entry.name, segments.ACK_PREFIX)
        if number is not None:
            ack_numbers.add(number)
    return segment_numbers, ack_numbers


def _scan_one(directory: Path, number: int, scan: _Scan) -> None:
    path = directory / segments.segment_name(number)
    data = path.read_bytes()
    start = _checked_start(data, path)
    found = records.scan_segment(data, number=number, start=start)
    for offset in found.skipped:
        log.error("%s: corrupt bytes at offset %d skipped (checksum mismatch)", path, offset)
    if found.valid_end < len(data):
        log.warning(
            "%s: torn or corrupt tail at offset %d, truncating %d bytes",
            path,
            found.valid_end,
            len(data) - found.valid_end,
        )
        os.truncate(path, found.valid_end)
    offsets = {offset for offset, _, _ in found.records}
    acked = _read_acks(directory / segments.ack_name(number), offsets)
    live: dict[int, int] = {}
    base_id = segments.msg_id_of(number, 0)
    for offset, length, message in found.records:
        position = base_id | offset
        if message.msg_id != position:
            scan.copies.setdefault(message.msg_id, []).append(position)
        if offset in acked:
            scan.acked.add(position)
        else:
            live[offset] = length
            scan.live[position] = message
    scan.segments[number] = Segment(directory, number, size=max(found.valid_end, start), live=live)


def _checked_start(data: bytes, path: Path) -> int:
    header = data[: records.FILE_HEADER_SIZE]
    if header == records.FILE_HEADER or len(header) < records.FILE_HEADER_SIZE:
        return records.FILE_HEADER_SIZE
    if header.startswith(records.SEGMENT_MAGIC):
        raise errors.UnsupportedFormatError(f"{path}: unknown segment format {header[4:]!r}")
    log.warning("%s: damaged file header, scanning its records anyway", path)
    return records.FILE_HEADER_SIZE


def _read_acks(path: Path, record_offsets: set[int]) -> set[int]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    offsets, valid_end = records.scan_acks(data)
    if valid_end < len(data):
        log.warning("%s: torn ack tail at offset %d, truncating", path, valid_end)
        os.truncate(path, valid_end)
    return record_offsets.intersection(offsets)


def _resolve_copies(scan: _Scan) -> None:
    copy_positions = {pos for positions in scan.copies.values() for pos in positions}
    for msg_id, copies in scan.copies.items():
        positions = list(copies)
        if msg_id not in copy_positions and (msg_id in scan.live or msg_id in scan.acked):
            positions.append(msg_id)
        newest = max(positions)
        for pos in positions:
            if pos != newest and pos in scan.live:
                _ack_position(scan, pos)


def _ack_position(scan: _Scan, position: int) -> None:
    number, offset = segments.split_msg_id(position)
    scan.segments[number].ack(offset)
    del scan.live[position]
