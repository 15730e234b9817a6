"""Where each durable queue's log lives under ``<data_dir>/msgs/``, whatever its name.

Vhost and queue names are AMQP short strings: any UTF-8 up to 255 bytes, ``/``, ``..`` and NUL
included, so they can never be used as path components. A queue's directory is named by a hash
of the length-prefixed (vhost, queue) pair and holds ``queue.json`` with the real names, which
is what ``existing_queues`` reports.

A directory is created when its queue gets its first persistent message, not when the queue is
declared: declaring thousands of durable queues must not cost thousands of fsync chains. It is
built under a temporary name and renamed into place with its metadata file inside, so a process
crash never leaves a directory without it. The fsyncs that make it survive a power cut are left
to the queue log's next sync pass, which runs before any message in it is confirmed; a power
cut before that can leave a directory whose metadata never reached the disk, holding nothing
confirmed: ``existing`` skips it, and ``existing_queue_dir`` repairs it if its queue is declared.

The directory name, not ``queue.json``, says whose log a directory is: the broker finds a log by
hashing the names, and a damaged ``queue.json`` (unreadable, or naming another queue) cannot
move the files. So such a label is kept aside in the quarantine, rewritten, and the log
recovered, with an ERROR line: one flipped byte in it never stops the broker or hides messages.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from hutch_broker.store import files, records
from hutch_broker.store.quarantine import Quarantine

log = logging.getLogger(__name__)

META_FILE = "queue.json"
INCOMPLETE_SUFFIX = ".creating"


def queue_path(root: Path, vhost: str, queue: str) -> Path:
    """The directory is named by the queue identity its segments carry (``records``)."""
    return root / records.queue_identity(vhost, queue).hex()


def describe_identity(root: Path, identity: bytes) -> str:
    """Whose log a queue identity is, for log lines: the names if a directory under ``root``
    holds that log, else the identity itself (a hash cannot be turned back into names)."""
    names = read_names(root / identity.hex())
    if names is not None:
        return describe(names)
    return f"the queue whose identity is {identity.hex()} (no log of it here)"


def existing_queue_dir(
    root: Path, vhost: str, queue: str, *, quarantine: Quarantine
) -> Path | None:
    """The queue's directory if there is one (its metadata rewritten if it was lost or
    damaged), else None."""
    path = queue_path(root, vhost, queue)
    if not path.is_dir():
        return None
    names = read_names(path)
    if names == (vhost, queue):
        return path
    meta = path / META_FILE
    if meta.exists():
        entry = quarantine.copy(
            meta,
            label=f"{path.name}-{META_FILE}",
            reason=f"{meta}: names {names!r}, but the directory is that of {(vhost, queue)!r}.",
        )
        log.error(
            "%s: says %s, but the directory is that of %s (its name is a hash of the names); "
            "kept in %s and rewritten, the log is recovered for %r",
            meta,
            "nothing readable" if names is None else describe(names),
            describe((vhost, queue)),
            entry,
            queue,
        )
    else:
        log.warning("%s: missing (a power cut before its first sync), rewritten", meta)
    files.write_atomically(meta, _meta_bytes(vhost, queue))
    return path


def create_queue_dir(root: Path, vhost: str, queue: str) -> list[Path]:
    """Create the queue's directory with its metadata, without waiting for the disk.

    Returns what to fsync (in any order) before anything in the directory counts as durable:
    the metadata file, the directory and ``root``.
    """
    path = queue_path(root, vhost, queue)
    incomplete = path.with_name(path.name + INCOMPLETE_SUFFIX)
    if incomplete.exists():
        shutil.rmtree(incomplete)
    incomplete.mkdir()
    (incomplete / META_FILE).write_bytes(_meta_bytes(vhost, queue))
    incomplete.rename(path)
    return [path / META_FILE, path, root]


def read_names(path: Path) -> tuple[str, str] | None:
    """(vhost, queue) from a queue directory's metadata, None if missing or unreadable."""
    try:
        meta = json.loads((path / META_FILE).read_bytes())
        vhost, queue = meta["vhost"], meta["queue"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(vhost, str) or not isinstance(queue, str):
        return None
    return vhost, queue


def describe(names: tuple[str, str] | None) -> str:
    """Whose log a directory is, for log lines."""
    if names is None:
        return "a queue log without readable metadata"
    vhost, queue = names
    return f"queue {queue!r} in vhost {vhost!r}"


def existing(root: Path) -> list[tuple[tuple[str, str], Path]]:
    """Every complete queue directory under ``root`` with its names, sorted by names."""
    found: list[tuple[tuple[str, str], Path]] = []
    for entry in root.iterdir():
        if not entry.is_dir() or "." in entry.name:
            continue
        names = read_names(entry)
        if names is None:
            log.warning("%s: queue directory without readable %s, ignored", entry, META_FILE)
            continue
        found.append((names, entry))
    return sorted(found, key=lambda item: item[0])


def remove_incomplete(root: Path) -> None:
    files.remove_tombstones(root)
    for entry in root.iterdir():
        if entry.name.endswith(INCOMPLETE_SUFFIX) and entry.is_dir():
            shutil.rmtree(entry)


def _meta_bytes(vhost: str, queue: str) -> bytes:
    return json.dumps({"vhost": vhost, "queue": queue}, ensure_ascii=True).encode("ascii")
