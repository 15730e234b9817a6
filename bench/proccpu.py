"""CPU time of processes from /proc: the broker's while it runs, the load generator's as it exits.

Why: on a 2-core machine the load generator (PerfTest's JVM, our loadgen) takes its CPU from
the same two cores as the broker. A broker's msg/s alone cannot say whether it was slow or
starved, so bench/run.py records both sides' CPU seconds for every cell from the same source,
/proc/<pid>/stat: utime and stime of the process (all its threads), plus cutime and cstime, the
time of the children it has waited for (a JVM's helper processes, a shell's command).

A process's own counters vanish once it is reaped, so ``run`` waits for the load generator's
exit without reaping it (``waitid`` with ``WNOWAIT``), reads its final stat from the zombie and
only then reaps it: the figure covers its whole life, not the last sample before it ended.

The parsing and summing are pure and pinned by tests/bench/test_proccpu.py.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

POLL_SECONDS = 0.05


@dataclass(frozen=True)
class StatTimes:
    """The four CPU counters of /proc/<pid>/stat, in clock ticks."""

    utime: int
    stime: int
    cutime: int
    cstime: int

    def own(self) -> int:
        return self.utime + self.stime

    def with_children(self) -> int:
        return self.utime + self.stime + self.cutime + self.cstime


def parse_stat(text: str) -> StatTimes:
    """Fields 14-17 of a /proc/<pid>/stat line.

    The command name (field 2) is in parentheses and may hold spaces and ')' itself, so the
    fields are counted from the last ')'.
    """
    head, sep, rest = text.rpartition(")")
    if not sep or not head:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    fields = rest.split()
    if len(fields) < 15:
        raise ValueError(f"/proc/<pid>/stat line too short: {text[:80]!r}")
    # fields[0] is field 3 (state); utime is field 14, so fields[11].
    try:
        return StatTimes(*(int(value) for value in fields[11:15]))
    except ValueError as error:
        raise ValueError(f"/proc/<pid>/stat counters not numbers: {text[:80]!r}") from error


def total_seconds(stats: Iterable[StatTimes], ticks: int, *, children: bool) -> float:
    """The CPU seconds of a set of processes: own time, plus their reaped children's if asked."""
    if ticks <= 0:
        raise ValueError(f"clock ticks per second must be positive, not {ticks}")
    total = sum(stat.with_children() if children else stat.own() for stat in stats)
    return total / ticks


def read_stat(pid: int, proc: Path = Path("/proc")) -> StatTimes:
    return parse_stat((proc / str(pid) / "stat").read_text())


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Finished:
    """A command that ran to its end, with the CPU it and its reaped children used."""

    returncode: int
    stdout: str
    stderr: str
    cpu_seconds: float | None
    wall_seconds: float


class RunTimeoutError(Exception):
    """The command did not exit in time; it has been killed."""


def run(command: Sequence[str], timeout: float) -> Finished:
    """Run ``command`` to its end (killed after ``timeout`` s), measuring its CPU from /proc.

    Output goes to temporary files, not pipes, so the command never blocks on a full pipe
    while this process waits for its exit without reading.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.monotonic()
        process = subprocess.Popen(command, stdout=out, stderr=err)
        try:
            exited = _wait_unreaped(process.pid, began + timeout)
            cpu = None
            if exited:
                try:
                    cpu = total_seconds([read_stat(process.pid)], clock_ticks(), children=True)
                except (OSError, ValueError):
                    cpu = None
            else:
                process.kill()
        finally:
            process.wait()
        wall = time.monotonic() - began
        if not exited:
            raise RunTimeoutError(f"{Path(command[0]).name} did not finish within {timeout:.0f}s")
        out.seek(0)
        err.seek(0)
        return Finished(
            returncode=process.returncode,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
            cpu_seconds=cpu,
            wall_seconds=wall,
        )


def _wait_unreaped(pid: int, deadline: float) -> bool:
    """Wait until ``pid`` has exited, leaving it a zombie whose /proc entry can still be read."""
    flags = os.WEXITED | os.WNOWAIT | os.WNOHANG
    while True:
        if os.waitid(os.P_PID, pid, flags) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
