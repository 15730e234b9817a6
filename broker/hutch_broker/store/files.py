"""Small filesystem helpers whose ordering matters for crash safety.

A rename is only durable once the directory holding it is fsynced, and a file replaced by
rename must be fsynced before the rename, or a crash can leave an empty or partial file under
the final name. These helpers are the one place that gets that order right.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

TOMBSTONE_SUFFIX = ".deleted"


def write_view(fd: int, data: bytes | bytearray | memoryview, at: int | None = None) -> None:
    """Write all of ``data``: from offset ``at`` (``pwrite``), or at the end of a file opened
    with ``O_APPEND`` when ``at`` is None; after a short write the rest follows, until none is
    left. The one such loop: the segment's records, its acks and the definitions journal."""
    view = memoryview(data)
    while view:
        if at is None:
            written = os.write(fd, view)
        else:
            written = os.pwrite(fd, view, at)
            at += written
        view = view[written:]


def fsync_dir(path: Path) -> None:
    _fsync(path, getattr(os, "O_DIRECTORY", 0))


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by name (a read-only descriptor is enough on Linux)."""
    _fsync(path, getattr(os, "O_CLOEXEC", 0))


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: readers see the old or the new content, never a mix."""
    temp_name = write_temp(path, data)
    try:
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    fsync_dir(path.parent)


def write_temp(path: Path, data: bytes) -> str:
    """``data`` in a fsynced temporary file next to ``path`` (to be renamed over it); its name."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as temp_file:
            temp_file.write(data)
            temp_file.flush()
            os.fsync(temp_file.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    return temp_name


def remove_tree(path: Path) -> None:
    """Delete a directory so that a crash midway never leaves a half-deleted one in place.

    The rename to a tombstone is atomic; ``remove_tombstones`` finishes the job after a crash.
    """
    tombstone = path.with_name(path.name + TOMBSTONE_SUFFIX)
    if tombstone.exists():
        shutil.rmtree(tombstone)
    try:
        path.rename(tombstone)
    except FileNotFoundError:
        return
    shutil.rmtree(tombstone)


def remove_tombstones(root: Path) -> None:
    for entry in root.iterdir():
        if entry.name.endswith(TOMBSTONE_SUFFIX) and entry.is_dir():
            shutil.rmtree(entry)
