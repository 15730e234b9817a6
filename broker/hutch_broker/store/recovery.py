"""Rebuilding one queue log from its directory, after a clean stop or a crash.

This is where "nothing confirmed is lost, nothing corrupt is served" is enforced on the read
side. Every segment is scanned in full and checked record by record (``records.scan_segment``);
a torn or corrupt tail is truncated away so it can never resurface; acks are read back with the
same torn-tail rule. A lost ack record only brings a message back (a redelivery), never loses
one.

Memory: the result is an index (``records.IndexedMessage``: fields, properties, body size), never
a body, so a broker restarts with more data than memory; the queue reads each body back when its
message reaches the head. Every body is still read once, to verify its checksum, one segment
file at a time (freed before the next). Not through ``mmap``, which would save that copy: an I/O
error under a mapping is a SIGBUS that stops the whole broker at every start, where ``read``
raises an ``OSError`` that sets just that queue's log aside (``messages``).

Compaction copies live records to a newer segment before the old one is unlinked, so a crash in
between leaves two copies of a record under the same msg_id. The newest copy (the highest
position) decides: acks always go to the newest copy, because compaction only copies live
records and redirects later acks to the copy. If the newest copy is live the message is live
and every older copy gets an ack record (so the old segment drains and is deleted normally; an
ack on an older copy therefore means nothing); if it is acked, the message is gone. A copy that
never became durable simply is not there, and the older one, still unacked, serves.

A crash while a retired segment is deleted is not damage: ``Segment.unlink`` renames the
segment to a tombstone ``msgs.N.deleted`` before it removes the ack file and then the tombstone,
so each crash point leaves a state of its own (the segment with its ack file; a tombstone with
or without the ack file), and recovery finishes a deletion it finds a tombstone for, at INFO
(``finish_deletions``). An ack file with neither its segment nor a tombstone is no crash state
of the broker's: the segment was lost, and that stays an ERROR.

Damage is reported, never hidden, and nothing is deleted (``quarantine``): cut tails are kept
as bytes, a segment with skipped corrupt bytes is copied aside, a damaged header is kept aside
before it is rewritten (from its intact copy, or from the salt its records prove), and a
segment none of whose records verifies (both salts gone, see ``records``) or whose header names
another queue is moved aside with its ack file. Each gets one ERROR line naming the file and
where it was put (a header restored from its intact copy, which loses nothing, a WARNING). A
cut tail's line says what is known of the records cut (``_cut_tail``): a WARNING only where it
is the torn end a crash leaves, whose write was never synced and so never confirmed. Only a
segment written in a format this version does not read stops the recovery
(``UnsupportedFormatError``): guessing at it could serve garbage.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NoReturn

from hutch_broker.store import errors, layout, records, segments
from hutch_broker.store.quarantine import Quarantine
from hutch_broker.store.records import IndexedMessage
from hutch_broker.store.segments import Segment

log = logging.getLogger(__name__)


@dataclass
class RecoveredLog:
    segments: dict[int, Segment]  # every segment file found, sealed, some possibly empty
    moved: dict[int, int]  # msg_id -> position, for records that compaction copied
    messages: list[IndexedMessage]  # live messages in msg_id (= append) order, no bodies
    next_number: int  # the first segment number never used in this directory


@dataclass
class _Scan:
    segments: dict[int, Segment] = field(default_factory=dict)
    live: dict[int, IndexedMessage] = field(default_factory=dict)  # position -> message
    acked: set[int] = field(default_factory=set)  # positions of records acked on disk
    copies: dict[int, list[int]] = field(default_factory=dict)  # msg_id -> copy positions


def recover_directory(
    directory: Path, *, quarantine: Quarantine, identity: bytes, stopped_cleanly: bool = False
) -> RecoveredLog:
    """Scan, repair and index every segment in ``directory``, the log of the queue with this
    ``identity`` (``records.queue_identity``). ``stopped_cleanly``: the last run synced and
    closed this log, so no write of it can have been interrupted (``_cut_tail``)."""
    segment_numbers, ack_numbers, tombstones = _list_numbers(directory)
    finish_deletions(directory, tombstones - segment_numbers, ack_numbers)
    for orphan in sorted(ack_numbers - segment_numbers):
        _set_aside_orphan_acks(directory / segments.ack_name(orphan), quarantine)
    scan = _Scan()
    newest = _newest_with_records(directory, segment_numbers)
    owner = layout.describe(layout.read_names(directory))
    for number in sorted(segment_numbers):
        segment = _SegmentFile(
            directory=directory,
            number=number,
            quarantine=quarantine,
            may_be_torn=newest is None or number >= newest,
            owner=owner,
            identity=identity,
            stopped_cleanly=stopped_cleanly,
        )
        _scan_one(segment, scan)
    _resolve_copies(scan)
    messages = list(scan.live.values())
    if scan.copies:
        messages.sort(key=lambda message: message.msg_id)
    moved = {message.msg_id: pos for pos, message in scan.live.items() if message.msg_id != pos}
    return RecoveredLog(
        segments=scan.segments,
        moved=moved,
        messages=messages,
        next_number=max(segment_numbers | ack_numbers | tombstones, default=0) + 1,
    )


def _list_numbers(directory: Path) -> tuple[set[int], set[int], set[int]]:
    """The numbers of the segment files, ack files and tombstones in ``directory``."""
    segment_numbers: set[int] = set()
    ack_numbers: set[int] = set()
    tombstones: set[int] = set()
    for entry in os.scandir(directory):
        number = segments.parse_number(entry.name, segments.SEGMENT_PREFIX)
        if number is not None:
            segment_numbers.add(number)
        number = segments.parse_number(entry.name, segments.ACK_PREFIX)
        if number is not None:
            ack_numbers.add(number)
        number = segments.parse_tombstone(entry.name)
        if number is not None:
            tombstones.add(number)
    return segment_numbers, ack_numbers, tombstones


def finish_deletions(directory: Path, numbers: set[int], ack_numbers: set[int]) -> None:
    """Finish deleting the segments a crash interrupted ``Segment.unlink`` for.

    A tombstone ``msgs.N.deleted`` exists only between the rename that started a deletion and
    the unlink that ends it, so segment N was retired: fully acked, or a compaction original
    whose copies were durable first. Its ack file, if still there, goes with it. Normal after
    a crash, hence INFO; removes ``numbers`` from ``ack_numbers``. (A tombstone beside a
    ``msgs.N`` of the same number cannot come from the broker: the caller leaves those alone
    and the files are recovered as usual.)
    """
    for number in sorted(numbers):
        for name in (segments.ack_name(number), segments.tombstone_name(number)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)
        ack_numbers.discard(number)
        log.info(
            "%s: finished deleting segment %d, which a stop interrupted (a normal crash state)",
            directory,
            number,
        )


def _newest_with_records(directory: Path, numbers: set[int]) -> int | None:
    """The segment the last run wrote records to last, where a crash tears a write.

    Runs write to ever newer segments, so a torn tail anywhere else is damage (or, rarely, a
    crash during a sync that was writing out two segments at once; the bytes are kept either
    way, and only the log level differs).
    """
    for number in sorted(numbers, reverse=True):
        path = directory / segments.segment_name(number)
        size = path.stat().st_size
        if size > records.V2_HEADER_SIZE:
            with path.open("rb") as file:
                if size > records.header_size(file.read(records.V2_HEADER_SIZE)):
                    return number
    return None


def _set_aside_orphan_acks(path: Path, quarantine: Quarantine) -> None:
    """An ack file whose segment is gone, with no tombstone: the segment and its messages
    were lost (a crash inside ``Segment.unlink`` leaves a tombstone, ``finish_deletions``)."""
    entry = quarantine.move(
        path,
        label=f"{path.parent.name}-{path.name}",
        reason=f"{path}: ack file without its segment file; the segment is missing.",
    )
    log.error(
        "%s: ack file without its segment (the segment was lost); moved to %s",
        path,
        entry,
    )


@dataclass(frozen=True)
class _SegmentFile:
    directory: Path
    number: int
    quarantine: Quarantine
    may_be_torn: bool  # no newer segment holds records (see ``_newest_with_records``)
    owner: str  # whose log, for the log lines
    identity: bytes  # the queue's, which a version 3 header must carry
    stopped_cleanly: bool  # the last run synced and closed the log: nothing can be torn

    @property
    def path(self) -> Path:
        return self.directory / segments.segment_name(self.number)

    @property
    def ack_path(self) -> Path:
        return self.directory / segments.ack_name(self.number)

    @property
    def where(self) -> str:
        return f"{self.path} ({self.owner})"

    @property
    def label(self) -> str:
        return f"{self.directory.name}-{self.path.name}"


def _scan_one(segment: _SegmentFile, scan: _Scan) -> None:
    data = segment.path.read_bytes()
    header = records.parse_file_header(data)
    if header.state is records.HeaderState.SHORT:
        what = f"{len(data)} bytes, less than a file header"
        if segment.stopped_cleanly:
            _set_aside_unreadable(segment, f"{what}, though the last run stopped cleanly")
        elif segment.may_be_torn:
            _note_empty(segment, what, scan)
        else:
            _set_aside_unreadable(segment, f"{what}, though newer segments hold records")
        return
    if header.state is records.HeaderState.OTHER_VERSION:
        _refuse(segment, header.version)
    intact = header.state is not records.HeaderState.DAMAGED  # a checksum proves the identity
    if intact and header.identity not in (None, segment.identity):
        _set_aside_foreign(segment, header.identity)
        return
    if header.state is records.HeaderState.DAMAGED:
        damaged = header
        header, found = _best_reading(damaged, data, segment.number)
        if not found.records and damaged.version == records.UNSALTED_VERSION:
            _refuse(segment, damaged.version)
        if not found.records:  # (a crash writes a header's bytes right, or not at all)
            _set_aside_unreadable(
                segment, "damaged file header, no record verifies with a salt in it"
            )
            return
        found_identities = {c.identity for c in damaged.candidates if c.identity is not None}
        if header.identity is not None and segment.identity not in found_identities:
            if len(found_identities) == 1:  # both copies name the same other queue
                _set_aside_foreign(segment, found_identities.pop())
                return
            header = replace(header, damage="its queue identity is unreadable in both copies")
    else:
        found = records.scan_segment(
            data, number=segment.number, salt=header.salt, start=header.size
        )
    if found.skipped:
        _report_skipped(segment, found)
    if header.state is not records.HeaderState.VALID:
        _repair_header(segment, header, data, len(found.records))
    if found.valid_end < len(data):
        _cut_tail(segment, data, found.valid_end)
    _index(segment, found, scan, header)


def _refuse(segment: _SegmentFile, version: int) -> NoReturn:
    raise errors.UnsupportedFormatError(
        f"{segment.where}: segment format version {version}, this broker reads versions "
        f"{' and '.join(map(str, records.READ_VERSIONS))} only (version 1 was a pre-release "
        "format); start the broker version that wrote it, or move the data directory away"
    )


def _best_reading(
    header: records.FileHeader, data: bytes, number: int
) -> tuple[records.FileHeader, records.SegmentScan]:
    """No copy of the header verifies: keep the reading (format version, salt) that the most
    records verify with. A wrong salt verifies none (each record's checksum starts from it),
    and a wrong header size only skips bytes, so the right one wins."""
    best_rank, best = (-1, 0), (header, records.SegmentScan([], [], len(data)))
    for candidate in header.candidates:
        found = records.scan_segment(data, number=number, salt=candidate.salt, start=candidate.size)
        rank = (len(found.records), -len(found.skipped))
        if rank > best_rank:
            best_rank, best = rank, (candidate, found)
    return best


def _note_empty(segment: _SegmentFile, what: str, scan: _Scan) -> None:
    """A segment without records: normal when a crash came before its first sync."""
    log.warning(
        "%s: %s; the last run did not stop cleanly, and a segment it created but had not "
        "written yet looks like this (then it held nothing synced, so nothing confirmed); "
        "it holds no records and is removed with the log's next sync",
        segment.where,
        what,
    )
    size = records.FILE_HEADER_SIZE
    scan.segments[segment.number] = Segment(
        segment.directory, segment.number, size=size, live={}, salt=0
    )


def _set_aside_unreadable(segment: _SegmentFile, why: str) -> None:
    """A segment (and its ack file) whose messages cannot be read or trusted."""
    entry = segment.quarantine.move(
        segment.path,
        segment.ack_path,
        label=segment.label,
        reason=f"{segment.where}: {why}; its messages could not be read.",
    )
    log.error(
        "%s: %s: unreadable segment moved to %s with its ack file; its messages are not recovered",
        segment.where,
        why,
        entry,
    )


def _set_aside_foreign(segment: _SegmentFile, identity: bytes) -> None:
    """A segment whose header names another queue: copied in from another log (by hand, a
    restore gone wrong). Its records would verify here and be served as this queue's
    messages, with this queue's ids, so it is moved aside, with the ack file of its number."""
    theirs = layout.describe_identity(segment.directory.parent, identity)
    entry = segment.quarantine.move(
        segment.path,
        segment.ack_path,
        label=segment.label,
        reason=f"{segment.where}: its header names {theirs}, not {segment.owner}.",
    )
    log.error(
        "%s: segment of another queue: its header names %s, this log is that of %s; moved to "
        "%s with the ack file of its number, its records are not served",
        segment.path,
        theirs,
        segment.owner,
        entry,
    )


def _repair_header(
    segment: _SegmentFile, header: records.FileHeader, data: bytes, verified: int
) -> None:
    """Rewrite a damaged header from what proves itself: the intact copy (REPAIRABLE), or the
    salt the records verify with (DAMAGED). The header as found is kept aside first."""
    if header.version == records.FORMAT_VERSION:
        rewritten = records.file_header(header.salt, segment.identity)
    else:
        rewritten = records.file_header_v2(header.salt)
    entry = segment.quarantine.keep(
        data[: len(rewritten)],
        name=f"{segment.path.name}.header",
        label=segment.label,
        reason=f"{segment.where}: damaged file header as found, before it was rewritten.",
    )
    if header.state is records.HeaderState.REPAIRABLE:
        log.warning(
            "%s: damaged file header: %s; restored from the intact copy, all %d records "
            "recovered; the header as found is kept in %s",
            segment.where,
            header.damage,
            verified,
            entry,
        )
    else:
        log.error(
            "%s: damaged file header (format version %d, %s); %d records verify with the "
            "salt it holds and are recovered, the header is rewritten; as found it is kept in %s",
            segment.where,
            header.version,
            header.damage or "no copy verifies",
            verified,
            entry,
        )
    fd = os.open(segment.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.pwrite(fd, rewritten, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def _report_skipped(segment: _SegmentFile, found: records.SegmentScan) -> None:
    entry = segment.quarantine.copy(
        segment.path,
        label=segment.label,
        reason=f"{segment.where}: corrupt bytes at {found.skipped} (start, end), skipped.",
    )
    for start, end in found.skipped:
        log.error(
            "%s: corrupt bytes at offsets %d-%d skipped (checksum mismatch), records after them "
            "recovered; the file as found is kept in %s",
            segment.where,
            start,
            end,
            entry,
        )


def _cut_tail(segment: _SegmentFile, data: bytes, valid_end: int) -> None:
    """Keep the bytes, then cut the file: a tail is never served and never resurfaces.

    The log line says what is known of the cut records. A publisher is confirmed only after
    the sync that wrote its record, and a crash can only interrupt a write that no sync had
    finished: so a torn end of the newest segment written, after a run that did not stop
    cleanly, is consistent with a write that was never confirmed (WARNING). Everything else is
    damage, and the records cut had been synced, so they may have been confirmed (ERROR): the
    last run stopped cleanly (every record synced); an ack names an offset at or past the cut
    (acks are written only after the records they ack are synced); newer segments hold
    records (a crash tears only the newest, see ``QueueStore._rotate``); or the bytes are no
    interrupted write (a complete record failing its checksum, garbage).
    """
    dropped = len(data) - valid_end
    if data[valid_end:].strip(b"\0"):
        kept: object = segment.quarantine.keep(
            data[valid_end:],
            name=f"{segment.path.name}.tail-from-{valid_end}",
            label=segment.label,
            reason=f"{segment.where}: {dropped} bytes cut from offset {valid_end}.",
        )
    else:
        kept = "nowhere (all zero bytes)"
    damage = _why_damage(segment, data, valid_end)
    if damage is None:
        log.warning(
            "%s: torn tail at offset %d, %d bytes cut off (kept in %s): the last run did not "
            "stop cleanly and this is the end of the newest segment it wrote, as a write the "
            "crash interrupted leaves it; such a write was never synced, so never confirmed",
            segment.where,
            valid_end,
            dropped,
            kept,
        )
    else:
        log.error(
            "%s: damaged tail at offset %d, %d bytes cut off (kept in %s): %s, so this is "
            "damage, not an interrupted write; the records in those bytes had been synced and "
            "may have been confirmed",
            segment.where,
            valid_end,
            dropped,
            kept,
            damage,
        )
    os.truncate(segment.path, valid_end)


def _why_damage(segment: _SegmentFile, data: bytes, valid_end: int) -> str | None:
    """Why a cut at ``valid_end`` cannot be a crash's interrupted write; None if it can."""
    if segment.stopped_cleanly:
        return "the last run stopped cleanly, with every record synced"
    try:
        acked = records.scan_acks(segment.ack_path.read_bytes()).offsets
    except FileNotFoundError:
        acked = []
    beyond = [offset for offset in acked if offset >= valid_end]
    if beyond:
        return (
            f"{segment.ack_path.name} acks a record at offset {min(beyond)} (acks are written "
            "after their records are synced)"
        )
    if not segment.may_be_torn:
        return "newer segments hold records (a crash tears only the newest one written)"
    if not records.looks_torn(data, valid_end):
        return "the bytes there are no unfinished record (a complete one fails its checksum)"
    return None


def _index(
    segment: _SegmentFile, found: records.SegmentScan, scan: _Scan, header: records.FileHeader
) -> None:
    offsets = {offset for offset, _, _ in found.records}
    acked = _read_acks(segment, offsets)
    live: dict[int, int] = {}
    base_id = records.msg_id_of(segment.number, 0)
    for offset, length, message in found.records:
        position = base_id | offset
        if message.msg_id != position:
            scan.copies.setdefault(message.msg_id, []).append(position)
        if offset in acked:
            scan.acked.add(position)
        else:
            live[offset] = length
            scan.live[position] = message
    size = max(found.valid_end, header.size)
    scan.segments[segment.number] = Segment(
        segment.directory,
        segment.number,
        size=size,
        live=live,
        salt=header.salt,
        data_start=header.size,
    )


def _read_acks(segment: _SegmentFile, record_offsets: set[int]) -> set[int]:
    path = segment.ack_path
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    found = records.scan_acks(data)
    if found.bad:
        log.warning(
            "%s: %d damaged ack records at %s skipped; those messages will be delivered again",
            path,
            len(found.bad),
            found.bad[:10],
        )
    if found.valid_end < len(data):
        _cut_ack_tail(segment, data, found.valid_end)
    return record_offsets.intersection(found.offsets)


def _cut_ack_tail(segment: _SegmentFile, data: bytes, valid_end: int) -> None:
    """A lost ack only brings a message back, hence a WARNING; the bytes are kept all the same."""
    path = segment.ack_path
    kept: object = "nowhere (all zero bytes)"
    if data[valid_end:].strip(b"\0"):
        kept = segment.quarantine.keep(
            data[valid_end:],
            name=f"{path.name}.tail-from-{valid_end}",
            label=f"{segment.directory.name}-{path.name}",
            reason=f"{path}: {len(data) - valid_end} bytes cut from offset {valid_end}.",
        )
    log.warning(
        "%s: torn ack tail at offset %d, %d bytes cut off (kept in %s)",
        path,
        valid_end,
        len(data) - valid_end,
        kept,
    )
    os.truncate(path, valid_end)


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
    number, offset = records.split_msg_id(position)
    scan.segments[number].ack(offset)
    del scan.live[position]
