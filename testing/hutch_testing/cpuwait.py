"""A span of wall-clock time less the time its two threads waited for a CPU.

Why: a canary's round trip to hutch-broker holds, besides the broker's own time, the time the
broker's loop thread and the canary's thread were runnable but not running (the kernel's
run-queue wait, the second field of ``/proc/<tid>/schedstat``). On a loaded shared 2-core CI
machine that share alone reaches tens of milliseconds and more: the machine's, not the broker's.
A blocked or busy loop accumulates no run-queue wait, so a broker that stalls on an expensive
request still shows its stall in full; only the wait for a CPU is taken out.

The one reading of the run-queue wait that the noisy suite (``hutch_testing.noisy.CpuWaits``),
the frame fuzzer's canary (tests/broker/fuzz/canary.py) and the serial pass's timing tests
(``Stopwatch``) share.
Standard library only: a canary script run with ``python -c`` imports it cheaply.
"""

from __future__ import annotations

import time
from pathlib import Path

OWN_THREAD = Path("/proc/thread-self/schedstat")


def run_queue_wait_ns(schedstat: Path) -> int:
    """How long the thread has been runnable but not running, in nanoseconds."""
    return int(schedstat.read_text().split()[1])


def loop_pid(broker: object) -> int | None:
    """hutch-broker's pid (its main thread runs the event loop), or None for any other broker.

    A test's vhost on a shared broker stands for its process. RabbitMQ spreads its work over
    the Erlang VM's scheduler threads, so no one thread's wait is its share: wall clock only.
    """
    broker = getattr(broker, "process", broker)
    if getattr(broker, "kind", None) != "hutch":
        return None
    pid = getattr(broker, "pid", None)
    return pid if isinstance(pid, int) else None


class Stopwatch:
    """Times spans in the calling thread: wall clock, and wall clock less both threads' waits.

    ``broker_pid`` None (or a kernel without schedstats): the second figure is the first.
    Use it from one thread: ``/proc/thread-self`` is whichever thread reads it.
    """

    def __init__(self, broker_pid: int | None) -> None:
        self.paths = [OWN_THREAD]
        if broker_pid is not None:
            self.paths.append(Path(f"/proc/{broker_pid}/schedstat"))
        if not all(path.exists() for path in self.paths):
            self.paths = []
        self._started = 0.0
        self._waited = 0

    def _waits(self) -> int:
        return sum(run_queue_wait_ns(path) for path in self.paths)

    def start(self) -> None:
        self._waited = self._waits()
        self._started = time.perf_counter()

    def stop(self) -> tuple[float, float]:
        """(seconds since ``start``, those seconds less the CPU waits since, at least 0)."""
        elapsed = time.perf_counter() - self._started
        waited = (self._waits() - self._waited) / 1e9
        return elapsed, max(0.0, elapsed - waited)
