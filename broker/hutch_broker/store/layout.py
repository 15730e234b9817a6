"""Where each durable queue's log lives under ``<data_dir>/msgs/``, whatever its name.

Vhost and queue names are AMQP short strings: any UTF-8 up to 255 bytes, ``/``, ``..`` and NUL
included, so they can never be used as path components. A queue's directory is named by a hash
of the length-prefixed (vhost, queue) pair and holds ``queue.json`` with the real names, which
is what ``existing_queues`` reports. A directory is created under a temporary name and renamed
into place once its metadata file is durable, so a crash never leaves a directory without it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import struct
from pathlib import Path

from hutch_broker.store import errors, files

log = logging.getLogger(__name__)

META_FILE = "queue.json"
INCOMPLETE_SUFFIX = ".creating"
_NAME_LENGTH = struct.Struct("<I")


def queue_path(root: Path, vhost: str, queue: str) -> Path:
    digest = hashlib.sha256()
    for name in (vhost, queue):
        encoded = name.encode("utf-8", "surrogatepass")
        digest.update(_NAME_LENGTH.pack(len(encoded)))
        digest.update(encoded)
    return root / digest.hexdigest()[:32]


def ensure_queue_dir(root: Path, vhost: str, queue: str) -> Path:
    """The queue's directory, created (durably, with its metadata) if it does not exist."""
    path = queue_path(root, vhost, queue)
    if path.is_dir():
        names = read_names(path)
        if names is not None and names != (vhost, queue):
            raise errors.StoreError(f"{path} belongs to queue {names!r}, not {(vhost, queue)!r}")
        if names is None:
            files.write_atomically(path / META_FILE, _meta_bytes(vhost, queue))
        return path
    incomplete = path.with_name(path.name + INCOMPLETE_SUFFIX)
    if incomplete.exists():
        shutil.rmtree(incomplete)
    incomplete.mkdir()
    files.write_atomically(incomplete / META_FILE, _meta_bytes(vhost, queue))
    incomplete.rename(path)
    files.fsync_dir(root)
    return path


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
