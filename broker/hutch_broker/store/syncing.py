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
from typing import Protocol

from hutch_broker.store import errors, files
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


class Log(Protocol):
    """The side of a queue log that a commit drives (``QueueStore``)."""

    def write_acks(self, sync_pass: SyncPass) -> None: ...

    def end_sync(self, sync_pass: SyncPass, *, finish: bool = True) -> None: ...


def commit(passes: Sequence[tuple[Log, SyncPass]], pool: Executor | None = None) -> bool:
    """fdatasync the records the passes wrote, then write their acks and fdatasync those.

    The one order for a pass over one log or a group commit over many: an ack may reach the
    kernel only once every log's records are durable, as it may retire the original of a copy
    in another log (``MessageStore.sync``). No ack is written when any fsync failed. Returns
    whether every write and fsync succeeded, the ``finish`` for ``end_all``.
    """
    sync_passes = [sync_pass for _, sync_pass in passes]
    run_all(sync_passes, pool)
    if any(sync_pass.error is not None for sync_pass in sync_passes):
        return False
    for log, sync_pass in passes:
        log.write_acks(sync_pass)
    run_all(sync_passes, pool, acks=True)
    return all(sync_pass.error is None for sync_pass in sync_passes)


def end_all(passes: Sequence[tuple[Log, SyncPass]], *, finish: bool) -> None:
    """End every pass (each holds its log's sync lock), then raise the first failure.

    ``finish`` only when every log's writes and fsyncs succeeded: else no log unlinks or
    compacts anything, as a segment retired by a dead-lettering ack may rely on a copy in the
    log that failed.
    """
    first: errors.StoreError | None = None
    for log, sync_pass in passes:
        try:
            log.end_sync(sync_pass, finish=finish)
        except errors.StoreError as exc:
            first = first or exc
    if first is not None:
        raise first


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
