"""The broker's definitions on disk: a snapshot plus a journal of changes, group-committed.

Why a journal: rewriting every definition on every change made declaring n durable queues cost
O(n^2) and an fsync chain per declare. Now ``definitions.json`` is a snapshot (the export
format, replaced atomically, as it always was) and ``definitions.log`` (format in ``journal``)
holds what changed since: one record per changed item. ``stage`` encodes a change as it happens;
``commit`` appends everything staged with one write and one fdatasync, which the server does
once per event-loop tick, before any reply that depends on it goes out.

Recovery (``recover``): the snapshot, then the journal's records in order up to the first bad
one. A torn tail is a write a crash interrupted, so nobody was told it happened; it is cut off.
Damage in the middle of the file (a bad record with valid ones after it) is not a crash but a
disk fault, and the records after it were acknowledged: the broker refuses to start, as it does
for an unreadable snapshot. Starting from the prefix would also make recovery delete the message
logs of every queue declared after the damage. The error says how to start from the prefix.

Why replaying records is safe over any snapshot taken after the journal began: every record
is a blind write. A put sets an item, a delete (and a vhost's or a user's cascade) removes
items, whatever was there before. So replaying the journal gives each item the value of the
last record that touched it, whatever the starting document held, and an item no record
touched keeps the value it had all along, which any snapshot holds. The one thing that breaks
this is a snapshot holding a change that no committed record holds.

Compaction in the background (``begin_compaction``, ``write_compaction``, ``finish_compaction``),
used once the broker runs, costs the event loop only a short step per turn:

1. rotate: ``definitions.log.next`` is created empty, and every commit appends to it from now
   on. The old journal is frozen. Recovery replays the snapshot, the old journal, then ``.next``.
2. the caller exports the model in slices (it starts after the rotation, and it waits until
   every change the export saw is committed, so the snapshot holds no uncommitted change).
3. a worker thread encodes the snapshot and writes it to a temporary file, with an fsync.
4. under ``_lock``: the temporary file is renamed over ``definitions.json`` (new snapshot + old
   journal + ``.next`` recovers right, by the blind-write argument), then ``.next`` is renamed
   over ``definitions.log`` (new snapshot + ``.next`` recovers right: the export started after
   the rotation), each rename followed by a directory fsync. The descriptor that appends keeps
   pointing at the same file across the rename.

A crash at any point leaves one of these states, and every acknowledged change is in the
journals that recovery replays. A synchronous ``compact`` (start-up, stop, or after a failure)
cancels a background one under the same lock, so a late rename never lands on newer files.

The synchronous ``compact`` is three atomic replacements, each leaving a pair of files that
recovers to the same definitions:

1. journal := [reset record holding the whole document]  old snapshot + reset  -> document
2. snapshot := document                                  new snapshot + reset  -> document
3. journal := empty                                      new snapshot + empty  -> document

A crash before step 1 leaves the old pair, which the committed records complete. The journal is
replaced before the snapshot because the other order could replay old records over a newer
snapshot, which is not idempotent (a delete that only the snapshot saw would come undone):
``compact`` is given the model's state, which may hold changes staged but not committed.
A ``.next`` journal left by a background compaction is removed right after step 1 (the reset
covers it; replaying it after the reset would only repeat its blind writes).

Missing or empty snapshot while the data directory holds data (Broker trust II, item 11): the
broker refuses to start (``MissingDefinitionsError``) rather than start with no usable user and
set every queue log aside. Only a journal whose first record is a reset (a crash during the
very first start-up compaction) stands in for the snapshot. To start fresh on purpose, move the
data directory aside; an empty data directory starts with the defaults.

Missing journal: every start-up ends with a compaction, so after a start of this version both
files exist. ``definitions.json`` without ``definitions.log`` is normal only for a data
directory last written by a broker without a journal; otherwise the changes since the last
snapshot are lost. Nobody can tell which, so recovery carries on and says so (WARNING), and the
message logs of queues it no longer knows are set aside in the quarantine, never deleted
(``messages.MessageStore.set_aside_unclaimed``). A cut journal tail is kept there too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hutch_broker.store import errors, files, journal
from hutch_broker.store.documents import KeyedDefinitions
from hutch_broker.store.quarantine import Quarantine

log = logging.getLogger(__name__)

SNAPSHOT_NAME = "definitions.json"
JOURNAL_NAME = "definitions.log"
NEXT_JOURNAL_NAME = "definitions.log.next"  # appended to while a background compaction runs
MIN_COMPACTION_BYTES = 1024 * 1024

_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


def save_definitions(path: Path, definitions: dict[str, Any]) -> None:
    """Replace the file atomically: temp file, fsync, rename, fsync the directory."""
    files.write_atomically(Path(path), _snapshot_bytes(definitions))


def load_definitions(path: Path) -> dict[str, Any] | None:
    """The saved definitions, None when there is no file; CorruptDefinitionsError if unreadable.

    A file that is not a JSON object is an error, not an empty broker: silently starting empty
    would drop every durable queue and its messages.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        definitions = json.loads(data.decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise errors.CorruptDefinitionsError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(definitions, dict):
        kind = type(definitions).__name__
        raise errors.CorruptDefinitionsError(f"{path}: expected a JSON object, found {kind}")
    return definitions


class DefinitionsStore:
    """``definitions.json`` plus ``definitions.log`` in one directory; event-loop thread only."""

    def __init__(
        self,
        directory: Path,
        *,
        min_compaction_bytes: int = MIN_COMPACTION_BYTES,
        quarantine_dir: Path | None = None,
    ) -> None:
        """``quarantine_dir`` defaults to ``<directory>/quarantine``."""
        self.snapshot_path = Path(directory) / SNAPSHOT_NAME
        self.journal_path = Path(directory) / JOURNAL_NAME
        self.next_journal_path = Path(directory) / NEXT_JOURNAL_NAME
        self._append_path = self.journal_path  # .next while a background compaction runs
        # Serializes a background compaction's renames with ``compact`` (which cancels it by
        # moving ``_generation`` on) and with reopening the append path.
        self._lock = threading.Lock()
        self._generation = 0
        self._compacting: int | None = None  # the generation of a running background compaction
        self._quarantine = Quarantine(quarantine_dir or Path(directory) / "quarantine")
        self._min_compaction_bytes = min_compaction_bytes
        self._pending = bytearray()
        self._pending_records = 0
        self._fd = -1
        self._journal_size = 0
        self._snapshot_size = 0
        self._broken = False  # an append failed: the journal's tail is unknown until compaction
        self.records_committed = 0  # since open, for tests and for the scaling check
        self.bytes_committed = 0

    def recover(self, *, other_data: bool = False) -> dict[str, Any] | None:
        """The saved definitions; None when nothing was ever saved (a first start).

        ``other_data``: the data directory holds message logs. Then, as when a journal file
        exists, a missing or empty snapshot is refused (MissingDefinitionsError), unless the
        journal starts with a reset record, which holds the whole document.
        """
        self._snapshot_size = _size(self.snapshot_path)
        journal_found = self.journal_path.exists() or self.next_journal_path.exists()
        if self._snapshot_size == 0 and (other_data or journal_found):
            self._refuse_without_snapshot(other_data=other_data)
        snapshot = load_definitions(self.snapshot_path)
        payloads = self._read_journal(self.journal_path)
        if self.next_journal_path.exists():  # a background compaction was cut short
            payloads += self._read_journal(self.next_journal_path)
            self._append_path = self.next_journal_path  # appends must follow its records
        self._warn_if_incomplete(snapshot_found=snapshot is not None)
        if snapshot is None and not payloads:
            return None
        document = KeyedDefinitions(snapshot)
        for index, payload in enumerate(payloads):
            _apply(document, payload, f"{self.journal_path}: record {index}")
        return document.to_export()

    def _refuse_without_snapshot(self, *, other_data: bool) -> None:
        if _starts_with_reset(self.journal_path):
            return
        state = "empty" if self.snapshot_path.exists() else "missing"
        holding = "message logs" if other_data else "a definitions journal"
        raise errors.MissingDefinitionsError(
            f"{self.snapshot_path}: {state} while the data directory holds {holding}: "
            "refusing to start, since starting with the defaults would lose every definition "
            "and set every queue log aside; restore the file, or to start fresh on purpose "
            f"move the data directory {self.snapshot_path.parent} aside"
        )

    def _warn_if_incomplete(self, *, snapshot_found: bool) -> None:
        journal_found = self.journal_path.exists()
        if snapshot_found and _size(self.journal_path) == 0:
            log.warning(
                "%s: %s while %s exists: normal only for a data directory last written by a "
                "broker without a journal, else the definitions changed since the last "
                "snapshot are lost (queue logs without a queue go to the quarantine)",
                self.journal_path,
                "empty" if journal_found else "missing",
                self.snapshot_path,
            )

    def stage(self, section: str, item: dict[str, Any], *, deleted: bool = False) -> None:
        """Encode one changed item now (later edits to ``item`` do not leak in)."""
        record = {"op": "delete" if deleted else "put", "section": section, "item": item}
        self._pending += journal.encode_record(_json_bytes(record))
        self._pending_records += 1

    @property
    def compaction_due(self) -> bool:
        if self._broken:
            return True
        if self._compacting is not None:
            return False
        leftover = self._append_path != self.journal_path  # a cut-short background compaction
        return leftover or self._journal_size > max(self._min_compaction_bytes, self._snapshot_size)

    @property
    def compacting(self) -> bool:
        return self._compacting is not None

    @property
    def can_compact_in_background(self) -> bool:
        """False after a failure or a cut-short one: then only ``compact`` cleans up."""
        return (
            not self._broken
            and self._compacting is None
            and (self._append_path == self.journal_path)
        )

    def commit(self) -> None:
        """Make everything staged durable: one write, one fdatasync."""
        if not self._pending:
            return
        if self._broken:
            raise errors.StoreError(f"{self.journal_path}: unusable after an I/O error")
        try:
            fd = self._open()
            files.write_view(fd, self._pending)
            _fdatasync(fd)
        except OSError:
            # The page cache may hold any part of the batch: only a compaction, which
            # writes fresh files, may be trusted again.
            self._broken = True
            raise
        self._journal_size += len(self._pending)
        self.bytes_committed += len(self._pending)
        self.records_committed += self._pending_records
        self._drop_pending()

    def compact(self, definitions: dict[str, Any]) -> None:
        """Replace both files by ``definitions`` (which includes whatever was staged), in one
        call; cancels a background compaction."""
        reset = journal.encode_record(_json_bytes({"op": "reset", "definitions": definitions}))
        snapshot = _snapshot_bytes(definitions)
        with self._lock:
            self._generation += 1
            self._compacting = None
            self._close()
            self._broken = True  # until the last step is done
            files.write_atomically(self.journal_path, journal.FILE_HEADER + reset)
            if self.next_journal_path.exists():
                self.next_journal_path.unlink()
                files.fsync_dir(self.next_journal_path.parent)
            self._append_path = self.journal_path
            files.write_atomically(self.snapshot_path, snapshot)
            files.write_atomically(self.journal_path, journal.FILE_HEADER)
            self._broken = False
        self._drop_pending()
        self._snapshot_size = len(snapshot)
        self._journal_size = journal.FILE_HEADER_SIZE

    def begin_compaction(self) -> int:
        """Step 1 of a background compaction (event loop): appends go to ``.next`` from now
        on. The caller must start its export after this returns. Returns a ticket."""
        if not self.can_compact_in_background:
            raise errors.StoreError(f"{self.journal_path}: cannot compact in the background now")
        self._close()
        files.write_atomically(self.next_journal_path, journal.FILE_HEADER)
        self._append_path = self.next_journal_path
        self._journal_size = journal.FILE_HEADER_SIZE
        self._generation += 1
        self._compacting = self._generation
        return self._generation

    def write_compaction(self, ticket: int, definitions: dict[str, Any]) -> int | None:
        """Steps 3 and 4, in a worker thread: the snapshot's size, or None when ``compact``
        cancelled this compaction. ``definitions`` must hold only committed changes."""
        snapshot = _snapshot_bytes(definitions)
        temp_name = files.write_temp(self.snapshot_path, snapshot)
        try:
            with self._lock:
                if self._generation != ticket or self._compacting != ticket:
                    return None
                os.replace(temp_name, self.snapshot_path)
                files.fsync_dir(self.snapshot_path.parent)
                os.replace(self.next_journal_path, self.journal_path)
                files.fsync_dir(self.journal_path.parent)
                self._append_path = self.journal_path
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp_name)  # only left when cancelled or failed
        return len(snapshot)

    def finish_compaction(self, ticket: int, snapshot_size: int | None) -> None:
        """On the event loop, after ``write_compaction``; also after it failed (size None)."""
        if self._compacting != ticket:
            return  # cancelled by ``compact``, which did the whole job
        self._compacting = None
        if snapshot_size is None:
            self._broken = True  # appends still go to .next: only ``compact`` cleans up
        else:
            self._snapshot_size = snapshot_size

    def close(self) -> None:
        self._close()

    def _drop_pending(self) -> None:
        self._pending.clear()
        self._pending_records = 0

    def _open(self) -> int:
        if self._fd < 0:
            with self._lock:  # not while a background compaction renames .next
                path = self._append_path
                if _size(path) == 0:  # none yet (a first start, or an older broker's)
                    files.write_atomically(path, journal.FILE_HEADER)
                    self._journal_size = journal.FILE_HEADER_SIZE
                flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
                self._fd = os.open(path, flags)
        return self._fd

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _read_journal(self, path: Path) -> list[bytes]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        found = journal.scan(data, name=str(path))
        dropped = len(data) - found.valid_end
        if found.damaged:
            raise errors.CorruptDefinitionsError(
                f"{path}: damaged record at offset {found.valid_end} with valid records after "
                "it (a disk fault, not a crash); refusing to start, since starting from the "
                "records before it would drop acknowledged definitions and the messages of "
                f"queues declared later. To start from that prefix anyway, keep a copy and "
                f"truncate the file to {found.valid_end} bytes."
            )
        if dropped:
            self._cut_tail(path, data, found.valid_end)
        self._journal_size = found.valid_end
        return found.payloads

    def _cut_tail(self, path: Path, data: bytes, valid_end: int) -> None:
        """A torn tail is a change nobody was told about; its bytes are kept all the same."""
        dropped = len(data) - valid_end
        entry = self._quarantine.keep(
            data[valid_end:],
            name=f"{path.name}.tail-from-{valid_end}",
            label=path.name,
            reason=f"{path}: {dropped} bytes cut from offset {valid_end}.",
        )
        torn = journal.looks_torn(data, valid_end)
        log.log(
            logging.WARNING if torn else logging.ERROR,
            "%s: %s at offset %d, truncating %d bytes (kept in %s)",
            path,
            "torn tail" if torn else "damaged last record (an acknowledged change may be lost)",
            valid_end,
            dropped,
            entry,
        )
        os.truncate(path, valid_end)


def _apply(document: KeyedDefinitions, payload: bytes, where: str) -> None:
    """One record onto the document; a record that passed its checksum but makes no sense is
    a bug or a newer format, never something to skip quietly."""
    try:
        record = json.loads(payload.decode("utf-8", "surrogatepass"))
        operation = record["op"]
        if operation == "reset":
            document.reset(record["definitions"])
        elif operation == "put":
            document.put(record["section"], record["item"])
        elif operation == "delete":
            document.delete(record["section"], record["item"])
        else:
            raise errors.UnsupportedFormatError(f"{where}: unknown operation {operation!r}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise errors.CorruptDefinitionsError(f"{where}: {exc!r}") from exc


def _json_bytes(value: Any) -> bytes:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def _snapshot_bytes(definitions: dict[str, Any]) -> bytes:
    text = json.dumps(definitions, indent=2, sort_keys=True, ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def _starts_with_reset(path: Path) -> bool:
    """Whether the journal's first record is a reset (which holds the whole document)."""
    try:
        with path.open("rb") as file:
            head = file.read(journal.FILE_HEADER_SIZE + journal.HEADER_SIZE + 64)
    except FileNotFoundError:
        return False
    marker = journal.FILE_HEADER_SIZE + journal.HEADER_SIZE
    return head.startswith(journal.FILE_HEADER) and head[marker:].startswith(b'{"op":"reset"')


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
