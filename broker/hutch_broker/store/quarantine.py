"""Where recovery puts data it cannot place, instead of deleting it: ``<data-dir>/quarantine/``.

Recovery meets files it cannot use: a queue log whose queue is not in the definitions (a lost
journal, a hand-edited snapshot), a segment whose records no longer verify, a damaged tail that
must be cut off before the log is appended to again. Deleting any of it would make a recovery
bug, or a recoverable operator mistake, a silent data loss. So nothing is deleted: each finding
becomes one entry ``<timestamp>-<label>/`` holding the moved (``os.rename``, same file system)
or copied files and a ``REASON.txt`` saying what they were and why they are here. The broker
never reads or removes an entry; an operator inspects it and deletes it, or moves data back
while the broker is stopped. The caller logs the ERROR line naming the entry.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from hutch_broker.store import files

REASON_FILE = "REASON.txt"


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Quarantine:
    """One quarantine directory; entries are created on demand, never removed."""

    def __init__(
        self, directory: Path, *, clock: Callable[[], datetime.datetime] = _utc_now
    ) -> None:
        self.directory = Path(directory)
        self._clock = clock

    def move(self, *paths: Path, label: str, reason: str) -> Path:
        """Move files or directories (those that exist) into a new entry; the entry."""
        entry = self._new_entry(label, reason)
        sources = {path.parent for path in paths}
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.rename(path, entry / path.name)
        self._settle(entry, *sources)
        return entry

    def copy(self, path: Path, *, label: str, reason: str) -> Path:
        """Copy a file that stays in use into an entry, unless an identical copy is kept."""
        kept = self._identical_copy(path, label)
        if kept is not None:
            return kept
        entry = self._new_entry(label, reason)
        shutil.copyfile(path, entry / path.name)
        files.fsync_path(entry / path.name)
        self._settle(entry)
        return entry

    def keep(self, data: bytes, *, name: str, label: str, reason: str) -> Path:
        """Write bytes about to be cut from a file into a new entry, as file ``name``."""
        entry = self._new_entry(label, reason)
        (entry / name).write_bytes(data)
        files.fsync_path(entry / name)
        self._settle(entry)
        return entry

    def _new_entry(self, label: str, reason: str) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = self._clock().strftime("%Y%m%dT%H%M%SZ")
        entry = self.directory / f"{stamp}-{label}"
        suffix = 1
        while True:
            try:
                entry.mkdir()
                break
            except FileExistsError:
                suffix += 1
                entry = self.directory / f"{stamp}-{label}-{suffix}"
        (entry / REASON_FILE).write_text(reason + "\n", encoding="utf-8")
        return entry

    def _settle(self, entry: Path, *changed: Path) -> None:
        """Make the entry and the renames survive a power cut."""
        files.fsync_path(entry / REASON_FILE)
        for directory in (entry, self.directory, *changed):
            files.fsync_dir(directory)

    def _identical_copy(self, path: Path, label: str) -> Path | None:
        """An entry for ``label`` already holding these exact bytes (damage found again at the
        next start-up needs no second copy)."""
        if not self.directory.is_dir():
            return None
        data = path.read_bytes()
        for entry in sorted(self.directory.glob(f"*-{label}*")):
            kept = entry / path.name
            if kept.is_file() and kept.stat().st_size == len(data) and kept.read_bytes() == data:
                return entry
        return None
