"""Durable-batch mode's log: planned batches as Arrow files on the driver's disk.

Why: in the default mode a batch that Spark logged but never committed replays *empty* after a
restart (the broker re-queued its messages, which arrive again later, so nothing is lost but the
replay differs). With `durableBatches=true` the source writes each planned batch to
`batchLogDir/<start>-<end>.arrow` (temporary file, fsync, rename, fsync of the directory) and acks
its messages right after, so a replay reads the identical rows back and nothing stays unacked across
a batch (docs/contracts/spark.md#durable-batches). Spark does not tell sources their checkpoint
location, hence the explicit directory; a local POSIX path only (no object stores in v1).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa

_NAME = re.compile(r"^(\d+)-(\d+)\.arrow$")


class BatchLog:
    """The staged batches of one query, keyed by their (start, end] seq range."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def find(self, start: int) -> tuple[int, pa.RecordBatch] | None:
        """A staged batch beginning at `start` (staged, but its offsets never reached Spark)."""
        for first, end, _path in self._entries():
            if first == start:
                batch = self.read(start, end)
                if batch is not None:
                    return end, batch
        return None

    def read(self, start: int, end: int) -> pa.RecordBatch | None:
        """The batch staged for (start, end], or None when there is none."""
        path = self._path(start, end)
        try:
            with pa.OSFile(str(path), "rb") as source:
                table = pa.ipc.open_file(source).read_all()
        except FileNotFoundError:
            return None
        batches = table.combine_chunks().to_batches()
        return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)

    def write(self, start: int, end: int, batch: pa.RecordBatch) -> Path:
        """Stages a batch crash-safely: temporary file, fsync, rename, fsync of the directory."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self._path(start, end)
        temporary = self.directory / f".{final.name}.tmp"
        with temporary.open("wb") as handle:
            with pa.ipc.new_file(handle, batch.schema) as writer:
                writer.write_batch(batch)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(final)
        directory_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
        return final

    def delete_through(self, end: int) -> None:
        """Drops every staged batch ending at or below `end` (Spark committed them)."""
        for _first, last, path in self._entries():
            if last <= end:
                path.unlink(missing_ok=True)

    def _entries(self) -> list[tuple[int, int, Path]]:
        if not self.directory.is_dir():
            return []
        entries = []
        for path in self.directory.iterdir():
            match = _NAME.match(path.name)
            if match:
                entries.append((int(match[1]), int(match[2]), path))
        return sorted(entries)

    def _path(self, start: int, end: int) -> Path:
        return self.directory / f"{start}-{end}.arrow"
