"""A starting vhost worker's sign of life while its loop cannot answer: one byte a second.

Why: the listener judges a worker stuck when its liveness question goes unanswered
(server/liveness.py), and a starting worker's loop does not run yet: it recovers its store
first, which takes as long as the store is big. Without a word from the worker in that time,
the listener could either never judge a start (a recovery that hangs, on a read that never
returns, would keep the worker's vhosts down for good) or judge it by a fixed bound (which a
big enough store would pass while working). So a thread of the worker beats for it: one byte
on the handover socket right away, then one each ``INTERVAL_S`` while the worker's main thread
made progress since the last beat, until the loop takes over and answers questions itself.

Progress is what a working recovery cannot help showing: the main thread's CPU time or the
bytes it read or wrote grew (``/proc/<pid>/task/<tid>/stat`` and ``io``, the main thread's own,
so this thread's work never counts). A main thread blocked for good (a read of a file nobody
writes, a disk that stopped answering) shows none, and a stopped process beats not at all;
either goes silent and the listener's bound applies. A byte is the same byte the loop answers
with (``handover.ANSWER``); the listener counts bytes, not which question each answers.

The decision (``progressed``) is pure; the thread only samples, decides and writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from hutch_broker.server import handover

INTERVAL_S = 1.0


@dataclasses.dataclass(frozen=True)
class Sample:
    """The main thread's work so far: CPU clock ticks, and bytes read and written."""

    cpu_ticks: int
    read_bytes: int
    written_bytes: int


def progressed(before: Sample | None, after: Sample | None) -> bool:
    """Whether the main thread worked between two samples; an unreadable sample is no
    evidence either way, so it counts as progress (a worker is never killed for /proc)."""
    if before is None or after is None:
        return True
    return after != before


def io_counters(io: str) -> dict[str, int]:
    """The counters of a ``/proc/<pid>[/task/<tid>]/io`` text by name (``ValueError`` if one
    is not a number): ``rchar``/``wchar`` bytes moved, ``syscr``/``syscw`` read and write calls."""
    pairs = (line.split(": ", 1) for line in io.splitlines() if ": " in line)
    return {name: int(value) for name, value in pairs}


def parse(stat: str, io: str) -> Sample:
    """A sample from a thread's ``stat`` and ``io`` files (``ValueError`` if malformed).

    ``stat``: the fields after the command's closing parenthesis (the command may hold spaces
    and parentheses), of which utime and stime are the 12th and 13th; ``io``: ``rchar`` and
    ``wchar``, the bytes the thread's read and write calls moved (the page cache's too).
    """
    fields = stat[stat.rindex(")") + 2 :].split()
    counters = io_counters(io)
    return Sample(
        cpu_ticks=int(fields[11]) + int(fields[12]),
        read_bytes=counters["rchar"],
        written_bytes=counters["wchar"],
    )


def sample_thread(pid: int, tid: int) -> Sample | None:
    """Thread ``tid``'s sample now, None if /proc cannot say."""
    task = Path(f"/proc/{pid}/task/{tid}")
    try:
        return parse((task / "stat").read_text(), (task / "io").read_text())
    except (OSError, ValueError, KeyError, IndexError):
        return None


class StartBeat:
    """Beats on ``sock`` for the calling (main) thread from ``start`` until ``stop``."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        interval_s: float = INTERVAL_S,
        sample: Callable[[], Sample | None] | None = None,
    ) -> None:
        self._sock = sock
        self._interval_s = interval_s
        pid, tid = os.getpid(), threading.get_native_id()
        self._sample = sample or (lambda: sample_thread(pid, tid))
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="start-beat", daemon=True)
        self.beats = 0

    def start(self) -> StartBeat:
        self._beat()  # at once: the worker's imports are done
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating (the loop answers from now on); returns once the thread ended."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        last = self._sample()
        while not self._stopped.wait(self._interval_s):
            now = self._sample()
            if progressed(last, now):
                self._beat()
            last = now

    def _beat(self) -> None:
        # A full socket means the listener reads nothing itself: nothing to tell it then.
        with contextlib.suppress(OSError):
            self._sock.send(handover.ANSWER, socket.MSG_DONTWAIT)
            self.beats += 1
