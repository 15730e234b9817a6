"""On-disk record formats of the message store: pure encode/decode, no I/O.

Kept apart from the file handling so that the torn-write, bit-flip and forgery rules can be read
(and tested) in one place. Everything is little-endian.

Segment file ``msgs.NNNNNNNNNN`` (format version 3)::

    file header   two identical copies, each                                           (80 bytes)
                  b"HMSG" | u32 format version | u64 salt | u32 CRC32 of those 16 bytes
                  | 16 bytes queue identity | u32 CRC32 of the 36 bytes before     (40 bytes)
    record*       u32 CRC32 of everything after it in the record, started from the record's
                  seed (below)
                  | u16 magic 0x5248 ("HR") | u16 record version | u32 payload length (12 bytes)
                  payload: u64 msg_id | u64 enqueued_at_ms | u64 expire_at_ms
                           | u8 exchange length | u8 routing-key length
                           | u32 properties length | u64 body length                 (38 bytes)
                           | exchange | routing key | raw properties | body

    seed          CRC32 of (u64 salt | u32 offset of the record in its segment)

The lengths sit together in front so that decoding is one ``unpack_from`` plus slices, and the
checksum comes first so that it covers one contiguous range: recovery reads 100k messages in
well under a second. The msg_id is stored in the record (not only implied by its position) so
that compaction can copy a live record to a newer segment without changing the id the broker
holds; the copy is re-sealed (``reseal``) for its new position.

Why the seed: after damage, recovery looks ahead for the next valid record (below), and a
message body is client-chosen bytes. With a plain checksum a client could publish a body that
*is* a complete, valid record and, after a torn tail or a flipped byte in front of it, have it
served as a message nobody published (a forged message, seen in the "Broker trust" torture
suite). Starting each record's CRC from a seed that mixes the segment's salt (64 random bits,
written only to the file header, never sent to any client) with the record's own offset binds a
record to one position of one segment file: a body cannot carry a record valid where it lands
without knowing the salt, except by a 2^-32 guess per candidate, the same odds as random damage
passing the checksum. Originals must also hold the msg_id of their position. We chose this over
ending the scan at the first bad record, which is simpler but gives up every confirmed record
behind one flipped bit. The header has its own CRC so that a flipped byte in it (damage, whose
salt can still be proven by the records it verifies) is told apart from an intact header of a
format this version does not read (refused, never guessed at). Version 1 (no salt) is refused.

Why two copies of the header (version 3): in version 2 (one 20-byte copy, still read, see
below) a flipped byte in the salt made every record of the segment unverifiable, so the whole
segment, confirmed messages and all, was set aside. A single damaged field of either copy now
fails that copy's checksum and the other copy restores it (``HeaderState.REPAIRABLE``). We
chose a second copy over deriving the salt from the records: 64 unknown bits cannot be searched,
and guessing only single-byte flips would repair some damage and not other. The header grows
from 20 to 80 bytes per segment (8 MB by default). Damage to both copies at once falls back to
version 2's rule: the salt of either copy is proven by the records that verify with it
(``DAMAGED``).

The queue identity (``queue_identity``: a hash of the queue's vhost and name, the same bytes as
its directory's name) says whose log the segment belongs to: a segment copied into another
queue's directory (by hand, a bad restore) would otherwise be served as that queue's, its
records hold the same positions and ids. Recovery sets such a segment aside.

Each copy starts with the 20 bytes a version 2 header has (with its own checksum), so a broker
that reads version 2 only sees an intact header of another version and refuses to start,
instead of taking the new header for damage and rewriting it.

Version 2 segments (``HMSG | u32 2 | u64 salt | u32 CRC32 of the 16 bytes before``, 20 bytes,
records from offset 20, no queue identity) are still read, repaired in their own format, and
never written: a reopened log always writes to a new segment, so they drain away.

Ack file ``acks.NNNNNNNNNN``: 8-byte records ``u32 offset | u32 CRC32(offset) ^ ACK_SALT``. The
checksum makes a zero-filled or garbage tail (a power cut after the size grew but before the
data landed) detectable; the salt keeps an all-zero record invalid. Ack files hold no client
bytes, and their records have a fixed size, so a bad one is simply skipped.

Rules shared by the scanners: a record is served only if its framing is complete, its CRC
(from its seed) matches, its fields fill the payload exactly and its msg_id fits its position.
At the first bad record the segment scan looks ahead for the next valid record; if there is
one, only the bad bytes are skipped (a flipped bit in the middle of a segment must not take the
confirmed records behind it down too), otherwise the scan ends there and the caller cuts the
file there: a torn tail is never served and never resurfaces.
"""

from __future__ import annotations

import enum
import hashlib
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

from hutch_broker import native

SEGMENT_MAGIC = b"HMSG"
FORMAT_VERSION = 3
READ_VERSIONS = (2, FORMAT_VERSION)
_PREFIX = struct.Struct("<4sIQI")  # magic, version, salt, CRC32 of the rest: version 2's header
_COPY = struct.Struct("<4sIQI16sI")  # the prefix, queue identity, CRC32 of the 36 bytes before
IDENTITY_SIZE = 16
COPY_SIZE = _COPY.size
FILE_HEADER_SIZE = 2 * COPY_SIZE  # where version 3 records start
V2_HEADER_SIZE = _PREFIX.size  # where version 2 records start
UNSALTED_VERSION = 1  # 8-byte header, no salt: written before 2, refused
_FIELD_NAMES = (  # of one header copy, by byte range, for the log line of a repair
    ((0, 4), "magic"),
    ((4, 8), "version"),
    ((8, 16), "salt"),
    ((16, 20), "first checksum"),
    ((20, 36), "queue identity"),
    ((36, 40), "checksum"),
)

RECORD_MAGIC = 0x5248
RECORD_VERSION = 2
MAX_PAYLOAD = 0xFFFF_FFFF
MAX_SHORTSTR = 255

_HEADER = struct.Struct("<IHHI")  # crc, magic, version, payload length
_FRAMING = struct.Struct("<HHI")  # the header after the crc: magic, version, payload length
_FIELDS = struct.Struct("<QQQBBIQ")  # msg_id, enqueued, expire-at, the four lengths
_MSG_ID = struct.Struct("<Q")
_SEED = struct.Struct("<QI")  # salt, offset
_ACK = struct.Struct("<II")  # offset, CRC32 of the offset's 4 bytes ^ _ACK_SALT
_ACK_SALT = 0x48_41_43_4B  # "HACK"
_MARKER = struct.pack("<HH", RECORD_MAGIC, RECORD_VERSION)
_CRC_SIZE = 4
_NAME_LENGTH = struct.Struct("<I")

HEADER_SIZE = _HEADER.size
# A msg id is (segment number, byte offset in the segment): an offset fits 32 bits.
OFFSET_BITS = 32
OFFSET_MASK = (1 << OFFSET_BITS) - 1
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


class RunRecord(NamedTuple):
    """A record of a run (``QueueStore.read_run``): a ``StoredMessage``'s fields and the
    record's length in its segment (the next record of the run starts that much further).

    Why not a ``StoredMessage`` and its length: a stream delivers every record it reads, and
    a frozen dataclass sets each field through ``object.__setattr__``, costlier than anything
    else in the decode. ``decode_run`` builds these with ``tuple.__new__``, in C."""

    msg_id: int
    enqueued_at_ms: int
    expire_at_ms: int
    exchange: str
    routing_key: str
    raw_properties: bytes
    body: bytes
    length: int


def run_record(stored: StoredMessage, length: int) -> RunRecord:
    """``stored`` as a record of a run (a run's first record read alone, as ``read`` does)."""
    return RunRecord(
        stored.msg_id,
        stored.enqueued_at_ms,
        stored.expire_at_ms,
        stored.exchange,
        stored.routing_key,
        stored.raw_properties,
        stored.body,
        length,
    )


_new_tuple = tuple.__new__


@dataclass(frozen=True, slots=True)
class IndexedMessage:
    """What recovery keeps of a verified record: everything but the body, and the body's size.

    Recovery reads every body once to verify its checksum but keeps none of them, so a broker
    restarts with more data than memory; a queue reads a body back (``QueueStore.read``) when
    the message reaches its head, as it does for bodies paged out at run time.
    """

    msg_id: int
    enqueued_at_ms: int
    expire_at_ms: int
    exchange: str
    routing_key: str
    raw_properties: bytes
    body_size: int


class HeaderState(enum.Enum):
    VALID = "valid"
    SHORT = "short"  # fewer bytes than a header: created, never written (or cut down to that)
    OTHER_VERSION = "other version"  # an intact header of a format this version does not read
    REPAIRABLE = "repairable"  # one copy verifies and restores the other (version 3)
    DAMAGED = "damaged"  # no copy verifies: the records decide between ``candidates``
    # (``version`` is ``UNSALTED_VERSION`` if it reads as version 1, else 0: unknown)


@dataclass(frozen=True, slots=True)
class FileHeader:
    state: HeaderState
    version: int
    salt: int  # as written; proven only by records that verify with it when DAMAGED
    size: int = FILE_HEADER_SIZE  # where the records start
    identity: bytes | None = None  # whose queue (version 3); None in version 2
    damage: str = ""  # REPAIRABLE and DAMAGED: what is wrong, for the log line
    candidates: tuple[FileHeader, ...] = ()  # DAMAGED: readings to try against the records


def queue_identity(vhost: str, queue: str) -> bytes:
    """The identity version 3 segments carry: a hash of the length-prefixed names.

    The same bytes name the queue's directory (``layout.queue_path``), which keeps the two
    from ever disagreeing about whose log a file is.
    """
    digest = hashlib.sha256()
    for name in (vhost, queue):
        encoded = name.encode("utf-8", "surrogatepass")
        digest.update(_NAME_LENGTH.pack(len(encoded)))
        digest.update(encoded)
    return digest.digest()[:IDENTITY_SIZE]


def file_header(salt: int, identity: bytes) -> bytes:
    """The header of a new segment file with this salt, for the queue with this identity."""
    if len(identity) != IDENTITY_SIZE:
        raise ValueError(f"queue identity of {len(identity)} bytes, not {IDENTITY_SIZE}")
    prefix = file_header_v2(salt, version=FORMAT_VERSION)
    head = prefix + identity
    copy = head + zlib.crc32(head).to_bytes(_CRC_SIZE, "little")
    return copy + copy


def file_header_v2(salt: int, *, version: int = 2) -> bytes:
    """A version 2 header (the first 20 bytes of each version 3 copy, with ``version`` 3):
    written only to repair a version 2 segment in its own format."""
    head = _PREFIX.pack(SEGMENT_MAGIC, version, salt, 0)[:-_CRC_SIZE]
    return head + zlib.crc32(head).to_bytes(_CRC_SIZE, "little")


def header_size(data: Buffer) -> int:
    """Where the records of a segment starting with ``data`` would begin (its version's
    header size; version 3's when the bytes do not say)."""
    if len(data) >= V2_HEADER_SIZE:
        magic, version, _, crc = _PREFIX.unpack_from(data, 0)
        if version == 2 and magic == SEGMENT_MAGIC and _crc_ok(data, 0, V2_HEADER_SIZE, crc):
            return V2_HEADER_SIZE
    return FILE_HEADER_SIZE


def parse_file_header(data: Buffer) -> FileHeader:
    """What a segment's first bytes say: see ``HeaderState``.

    Only a checksum that holds makes a version count: an intact header of an unknown version is
    refused, a damaged one is not taken for another format (a flipped version byte once stopped
    the broker). With no copy intact, every reading (version 2's, each version 3 copy's) becomes
    a candidate, and the caller keeps the one most records verify with.
    """
    if len(data) < V2_HEADER_SIZE:
        return FileHeader(HeaderState.SHORT, 0, 0)
    magic, version, salt, crc = _PREFIX.unpack_from(data, 0)
    if _crc_ok(data, 0, V2_HEADER_SIZE, crc):
        if magic != SEGMENT_MAGIC or version not in READ_VERSIONS:
            return FileHeader(HeaderState.OTHER_VERSION, version, salt)
        if version == 2:
            return FileHeader(HeaderState.VALID, 2, salt, size=V2_HEADER_SIZE)
        if len(data) < FILE_HEADER_SIZE:  # a version 3 header cut short: written in part
            return FileHeader(HeaderState.SHORT, version, salt)
    copies = [_copy(data, start) for start in (0, COPY_SIZE) if start + COPY_SIZE <= len(data)]
    intact = [index for index, copy in enumerate(copies) if copy[2]]
    if intact == [0, 1] and copies[0] == copies[1]:
        return _v3(HeaderState.VALID, copies[0])
    if len(intact) == 1:
        good = intact[0]
        return _v3(
            HeaderState.REPAIRABLE,
            copies[good],
            damage=f"its {_ORDINALS[1 - good]} copy is damaged ({_damaged_fields(data, good)}), "
            f"the {_ORDINALS[good]} copy is intact",
        )
    # Version 1 had no checksum: its header reads as version 1 here, but so does a version 3
    # header with one flipped bit whose other copy is damaged too. If no record verifies with
    # a salt (version 1 records never do), the caller refuses it as version 1.
    unsalted = magic == SEGMENT_MAGIC and version == UNSALTED_VERSION
    candidates = [FileHeader(HeaderState.DAMAGED, 2, salt, size=V2_HEADER_SIZE)]
    candidates += [_v3(HeaderState.DAMAGED, copy) for copy in copies]
    return FileHeader(
        HeaderState.DAMAGED,
        UNSALTED_VERSION if unsalted else 0,
        salt,
        damage="no copy verifies",
        candidates=tuple(candidates),
    )


_Copy = tuple[int, bytes, bool]  # salt, identity, intact
_ORDINALS = ("first", "second")


def _copy(data: Buffer, start: int) -> _Copy:
    magic, version, salt, prefix_crc, identity, crc = _COPY.unpack_from(data, start)
    intact = (
        magic == SEGMENT_MAGIC
        and version == FORMAT_VERSION
        and _crc_ok(data, start, start + V2_HEADER_SIZE, prefix_crc)
        and _crc_ok(data, start, start + COPY_SIZE, crc)
    )
    return salt, bytes(identity), intact


def _v3(state: HeaderState, copy: _Copy, *, damage: str = "") -> FileHeader:
    salt, identity, _ = copy
    return FileHeader(state, FORMAT_VERSION, salt, identity=identity, damage=damage)


def _damaged_fields(data: Buffer, good: int) -> str:
    """The fields in which the damaged copy differs from the intact copy ``good``."""
    mine, other = (1 - good) * COPY_SIZE, good * COPY_SIZE
    return ", ".join(
        name
        for (start, end), name in _FIELD_NAMES
        if bytes(data[mine + start : mine + end]) != bytes(data[other + start : other + end])
    )


def _crc_ok(data: Buffer, start: int, end: int, crc: int) -> bool:
    """Whether the CRC32 of ``data[start:end - 4]`` is ``crc``."""
    return zlib.crc32(memoryview(data)[start : end - _CRC_SIZE]) == crc


def record_seed(salt: int, offset: int) -> int:
    """Where the CRC of the record at ``offset`` of a segment with this salt starts."""
    return zlib.crc32(_SEED.pack(salt, offset))


def msg_id_of(number: int, offset: int) -> int:
    return (number << OFFSET_BITS) | offset


def split_msg_id(msg_id: int) -> tuple[int, int]:
    """(segment number, offset): a stream's index, in the model, keys its segments by number."""
    return msg_id >> OFFSET_BITS, msg_id & OFFSET_MASK


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
    seed: int,
    msg_id: int,
    enqueued_at_ms: int,
    expire_at_ms: int,
    exchange: bytes,
    routing_key: bytes,
    raw_properties: bytes,
    body: bytes,
) -> bytes:
    """Everything of a record but the body, which the caller appends unchanged (no copy here).

    ``seed`` is ``record_seed`` of the segment's salt and the offset the record goes to.
    """
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
    crc = zlib.crc32(body, zlib.crc32(fields, zlib.crc32(framing, seed)))
    return b"".join((crc.to_bytes(4, "little"), framing, fields))


def reseal(record: Buffer, seed: int) -> bytes:
    """A verified record, checksummed for another position (a compaction copy)."""
    body = memoryview(record)[_CRC_SIZE:]
    return zlib.crc32(body, seed).to_bytes(_CRC_SIZE, "little") + bytes(body)


def framed_length(data: Buffer, offset: int) -> int | None:
    """Length of the record at ``offset`` if its header is plausible and complete, else None."""
    if offset + HEADER_SIZE > len(data):
        return None
    _, magic, version, payload_length = _HEADER.unpack_from(data, offset)
    if magic != RECORD_MAGIC or version != RECORD_VERSION or payload_length < _FIELDS.size:
        return None
    length = HEADER_SIZE + int(payload_length)
    return length if offset + length <= len(data) else None


def _checked_length(data: Buffer, offset: int, seed: int) -> int | None:
    length = framed_length(data, offset)
    if length is None:
        return None
    crc = zlib.crc32(memoryview(data)[offset + _CRC_SIZE : offset + length], seed)
    return length if crc == _HEADER.unpack_from(data, offset)[0] else None


def decode_record(
    data: Buffer, offset: int, *, seed: int, view: memoryview | None = None
) -> StoredMessage | None:
    """The record at ``offset``, or None when it is torn, corrupt, inconsistent or not sealed
    for ``seed`` (its position).

    ``view``, a memoryview of ``data``, saves creating one per record when scanning.
    """
    layout = _verify(data, offset, seed, memoryview(data) if view is None else view)
    if layout is None:
        return None
    msg_id, enqueued, expire_at, key_start, properties_start, body_start, end = layout
    return StoredMessage(
        msg_id,
        enqueued,
        expire_at,
        bytes(data[offset + HEADER_SIZE + _FIELDS.size : key_start]).decode(
            "utf-8", "surrogatepass"
        ),
        bytes(data[key_start:properties_start]).decode("utf-8", "surrogatepass"),
        bytes(data[properties_start:body_start]),
        bytes(data[body_start:end]),
    )


def decode_run(
    chunk: bytes, msg_id: int, lengths: list[int], *, salt: int, offset: int
) -> list[RunRecord]:
    """The records laid end to end in ``chunk``, each with its length: ``chunk`` was read at
    ``offset`` of a segment with this ``salt``, its first record is ``msg_id`` and ``lengths``
    are the live records' lengths from there. Stops before the first record that
    ``decode_record`` would refuse, whose msg_id is not its position's or whose length in
    ``lengths`` is not its framed length.

    In C (``_runs``: a fifth of the broker's CPU per stream delivery saved) when the extension
    is built, else ``decode_run_python``: the same results and the same stops.
    """
    if _native_decode_run is not None:
        return _native_decode_run(RunRecord, chunk, msg_id, lengths, salt, offset)
    return decode_run_python(chunk, msg_id, lengths, salt=salt, offset=offset)


def decode_run_python(
    chunk: bytes, msg_id: int, lengths: list[int], *, salt: int, offset: int
) -> list[RunRecord]:
    """``decode_run`` in Python: the C loop's twin, and the broker's when it is not built.

    Why not ``decode_record`` per record: a stream delivers every record it reads, and the
    four calls a record made (``decode_record``, ``_verify``, the segment's ``seed`` and
    ``record_seed``) were a third of the Python calls of a stream delivery, and a
    ``StoredMessage`` a record another (``RunRecord``). The checks are the
    same, in one loop: each record still has its own checksum, seeded by its position, so each
    is still verified on its own.
    """
    view = memoryview(chunk)
    size = len(chunk)
    unpack_header = _HEADER.unpack_from
    unpack_fields = _FIELDS.unpack_from
    pack_seed = _SEED.pack
    crc32 = zlib.crc32
    fields_size = _FIELDS.size
    found: list[RunRecord] = []
    at = 0
    for length in lengths:
        start = at + HEADER_SIZE
        if start > size:
            break
        crc, magic, version, payload_length = unpack_header(chunk, at)
        end = start + payload_length
        if (
            magic != RECORD_MAGIC
            or version != RECORD_VERSION
            or payload_length < fields_size
            or end > size
            or length != end - at
            or crc32(view[at + _CRC_SIZE : end], crc32(pack_seed(salt, offset + at))) != crc
        ):
            break
        (
            record_id,
            enqueued,
            expire_at,
            exchange_length,
            key_length,
            properties_length,
            body_length,
        ) = unpack_fields(chunk, start)
        key_start = start + fields_size + exchange_length
        properties_start = key_start + key_length
        body_start = properties_start + properties_length
        if body_start + body_length != end or record_id != msg_id + at:
            break
        found.append(
            _new_tuple(
                RunRecord,
                (
                    record_id,
                    enqueued,
                    expire_at,
                    chunk[start + fields_size : key_start].decode("utf-8", "surrogatepass"),
                    chunk[key_start:properties_start].decode("utf-8", "surrogatepass"),
                    chunk[properties_start:body_start],
                    chunk[body_start:end],
                    length,
                ),
            )
        )
        at = end
    return found


# The C loop, unless it was not built or HUTCH_BROKER_PURE_PYTHON is set (hutch_broker.native).
_native_decode_run: Callable[..., list[RunRecord]] | None = native.load(
    "hutch_broker.store._runs", "decode_run"
)
NATIVE_RUNS: Final = _native_decode_run is not None
"""True when ``decode_run`` runs in C (logged at start, and in ``/api/nodes``'s applications)."""


_Layout = tuple[int, int, int, int, int, int, int]


def _verify(data: Buffer, offset: int, seed: int, view: memoryview) -> _Layout | None:
    """The fixed fields and field boundaries of a record whose checksum and framing hold:
    (msg_id, enqueued, expire-at, routing-key start, properties start, body start, end).

    The hot path of recovery, hence in one piece; the CRC runs over a view (no copy of the body
    is made here).
    """
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
        or zlib.crc32(view[offset + _CRC_SIZE : end], seed) != crc
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
    return msg_id, enqueued, expire_at, key_start, properties_start, body_start, end


class _Shared:
    """One object per distinct exchange, routing key and content header within a scan.

    A queue's messages mostly share these (one exchange, a few keys, identical properties), so
    100k recovered messages hold a handful of strings instead of 300k copies. Bounded: past
    ``MAX_SHARED`` distinct values new ones are simply not shared.
    """

    MAX_SHARED = 4096

    def __init__(self) -> None:
        self._names: dict[bytes, str] = {}
        self._properties: dict[bytes, bytes] = {}

    def name(self, raw: bytes) -> str:
        found = self._names.get(raw)
        if found is None:
            found = raw.decode("utf-8", "surrogatepass")
            if len(self._names) < self.MAX_SHARED:
                self._names[raw] = found
        return found

    def properties(self, raw: bytes) -> bytes:
        found = self._properties.get(raw)
        if found is None:
            found = raw
            if len(self._properties) < self.MAX_SHARED:
                self._properties[raw] = raw
        return found


def _indexed(data: Buffer, offset: int, layout: _Layout, shared: _Shared) -> IndexedMessage:
    msg_id, enqueued, expire_at, key_start, properties_start, body_start, end = layout
    return IndexedMessage(
        msg_id,
        enqueued,
        expire_at,
        shared.name(bytes(data[offset + HEADER_SIZE + _FIELDS.size : key_start])),
        shared.name(bytes(data[key_start:properties_start])),
        shared.properties(bytes(data[properties_start:body_start])),
        end - body_start,
    )


def checked_msg_id(data: Buffer, offset: int, *, seed: int) -> int | None:
    """The msg_id of the record at ``offset`` if its checksum holds, without decoding it."""
    if _checked_length(data, offset, seed) is None:
        return None
    return int(_MSG_ID.unpack_from(data, offset + HEADER_SIZE)[0])


@dataclass(frozen=True, slots=True)
class SegmentScan:
    records: list[tuple[int, int, IndexedMessage]]  # (offset, length, index) in file order
    skipped: list[tuple[int, int]]  # (start, end) of corrupt bytes that valid records follow
    valid_end: int  # where the file must be cut to drop a torn or corrupt tail


def scan_segment(
    data: bytes, *, number: int, salt: int, start: int = FILE_HEADER_SIZE
) -> SegmentScan:
    """Every valid record of segment ``number``'s file bytes, in file order: each one verified,
    body included, and indexed without its body."""
    records: list[tuple[int, int, IndexedMessage]] = []
    skipped: list[tuple[int, int]] = []
    shared = _Shared()
    base_id = number << 32
    pos = start
    with memoryview(data) as view:
        while pos < len(data):
            layout = _verify(data, pos, record_seed(salt, pos), view)
            if layout is not None and _plausible_id(layout[0], base_id, pos):
                end = layout[-1]
                records.append((pos, end - pos, _indexed(data, pos, layout, shared)))
                pos = end
                continue
            resume = _resync(data, pos + 1, base_id, salt, view)
            if resume is None:
                break
            skipped.append((pos, resume))
            pos = resume
    return SegmentScan(records=records, skipped=skipped, valid_end=pos)


def _plausible_id(msg_id: int, base_id: int, offset: int) -> bool:
    """A record's own position, or a compaction copy of a record from an older segment."""
    return msg_id == base_id | offset or (1 << 32) <= msg_id < base_id


def _resync(data: bytes, start: int, base_id: int, salt: int, view: memoryview) -> int | None:
    """The next valid record after corrupt bytes, if there is one.

    Safe against forged records inside a body: a candidate must verify with the seed of the
    position it sits at, which only the salt's owner can compute (see the module docstring).
    """
    found = data.find(_MARKER, start + _CRC_SIZE)
    while found >= 0:
        candidate = found - _CRC_SIZE
        layout = _verify(data, candidate, record_seed(salt, candidate), view)
        if layout is not None and _plausible_id(layout[0], base_id, candidate):
            return candidate
        found = data.find(_MARKER, found + 1)
    return None


def looks_torn(data: Buffer, offset: int) -> bool:
    """Whether the bytes from ``offset`` on look like an interrupted write rather than damage:
    zeros (a power cut after the size grew), a partial header, or a record running past the end.
    """
    if not bytes(data[offset:]).strip(b"\0") or offset + HEADER_SIZE > len(data):
        return True
    _, magic, version, payload_length = _HEADER.unpack_from(data, offset)
    complete = offset + HEADER_SIZE + payload_length <= len(data)
    return magic == RECORD_MAGIC and version == RECORD_VERSION and not complete


def encode_ack(offset: int) -> bytes:
    """The ack record of ``offset``: the one definition of a valid ack record (``scan_acks``
    takes a record for valid only if it is exactly these bytes; it checks the second field with
    this formula, and ``test_records`` holds the two to each other over every kind of record).

    Runs once per acked persistent message, so it is the formula itself, not a call to a
    helper: a shared checksum function cost a call per ack.
    """
    return _ACK.pack(offset, zlib.crc32(offset.to_bytes(4, "little")) ^ _ACK_SALT)


@dataclass(frozen=True, slots=True)
class AckScan:
    offsets: list[int]  # acked offsets, in file order
    bad: list[int]  # offsets of damaged ack records with valid ones after them, skipped
    valid_end: int  # end of the last valid record: the file is cut there


def scan_acks(data: Buffer) -> AckScan:
    """Acked offsets in an ack file's bytes; a bad record is skipped, a bad tail cut.

    A record is valid only when it is exactly ``encode_ack``'s bytes for its offset: its second
    field is the checksum ``encode_ack`` computes (the same formula, spelled out: struct packs
    both fields one way only, so equal fields are equal bytes). The whole records are unpacked
    in one pass (``iter_unpack`` over a view), not sliced one by one and encoded again for a
    bytes comparison: recovery reads every ack a log ever took, and that cost 0.62 µs a record.
    """
    crc32, salt = zlib.crc32, _ACK_SALT
    offsets: list[int] = []
    bad: list[int] = []
    valid_end = pos = 0
    whole = len(data) - len(data) % ACK_RECORD_SIZE
    with memoryview(data) as view, view[:whole] as records:
        for offset, check in _ACK.iter_unpack(records):
            if check == crc32(offset.to_bytes(4, "little")) ^ salt:
                offsets.append(offset)
                if pos != valid_end:
                    bad.extend(range(valid_end, pos, ACK_RECORD_SIZE))
                valid_end = pos + ACK_RECORD_SIZE
            pos += ACK_RECORD_SIZE
    return AckScan(offsets=offsets, bad=bad, valid_end=valid_end)
