"""The fsync half of a sync pass: run outside every lock, in parallel when there is a pool.

Split from the buffer work because of how CPython threads behave: a thread coming back from a
blocking syscall has to win the GIL back, and while the event loop is busy that can take a whole
switch interval (5 ms). The sync side therefore keeps its short syscalls (pwrite, close,
unlink) under the queue lock, where the event loop blocks and hands the GIL straight back, and
runs only the fdatasyncs here. Many of them (one per touched segment or ack file, across every
dirty queue) go to a small thread pool, so their waits overlap instead of adding up, and the
filesystem journal can merge them into one commit.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

from hutch_broker.store import files
from hutch_broker.store.segments import Segment

_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


@dataclass(eq=False)
class SyncPass:
    """What one queue log flushed in a sync pass and must now fsync."""

    gen: int
    fds: list[int]  # segment files whose records were written
    paths: list[Path]  # fsynced too: the directory when a segment file was created, and a new
    # queue directory's metadata file, itself and its parent
    flushed: list[Segment]
    acked: list[Segment]  # segments whose ack files were written
    # Acks buffered when the pass began, written once every log's records are durable
    # (``write_acks``), then fsynced in a round of their own (``ack_fds``).
    ack_data: list[tuple[Segment, bytearray]] = field(default_factory=list)
    ack_fds: list[int] = field(default_factory=list)
    error: OSError | None = field(default=None)

    def run(self, pool: Executor | None = None, *, acks: bool = False) -> None:
        run_all([self], pool, acks=acks)


def run_all(
    passes: Sequence[SyncPass], pool: Executor | None = None, *, acks: bool = False
) -> None:
    """fdatasync what the passes wrote: the records and paths, or with ``acks`` the ack files.

    Errors are recorded on their pass, not raised.
    """
    jobs: list[tuple[SyncPass, Callable[[], None]]] = [
        (sync_pass, functools.partial(_fdatasync, fd))
        for sync_pass in passes
        for fd in (sync_pass.ack_fds if acks else sync_pass.fds)
    ]
    jobs += [
        (sync_pass, functools.partial(files.fsync_path, path))
        for sync_pass in passes
        for path in ([] if acks else sync_pass.paths)
    ]
    if pool is None or len(jobs) <= 1:
        for job in jobs:
            _run_job(job)
    else:
        list(pool.map(_run_job, jobs))


def _run_job(job: tuple[SyncPass, Callable[[], None]]) -> None:
    sync_pass, action = job
    try:
        action()
    except OSError as exc:
        sync_pass.error = sync_pass.error or exc
