"""The broker's definitions file: vhosts, users, policies, durable exchanges, queues, bindings.

Rewritten whole on every definitions change (they are small and change rarely), atomically:
a crash leaves either the previous file or the new one, never a truncated mix, so a broker that
restarts never comes back without its queues. A file that is not a JSON object is an error, not
an empty broker: silently starting empty would drop every durable queue and its messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hutch_broker.store import errors, files


def save_definitions(path: Path, definitions: dict[str, Any]) -> None:
    """Replace the file atomically: temp file, fsync, rename, fsync the directory."""
    data = json.dumps(definitions, indent=2, sort_keys=True, ensure_ascii=False)
    files.write_atomically(Path(path), data.encode("utf-8", "surrogatepass"))


def load_definitions(path: Path) -> dict[str, Any] | None:
    """The saved definitions, None when there is no file; CorruptDefinitionsError if unreadable."""
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
