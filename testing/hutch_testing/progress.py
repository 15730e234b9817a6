"""Waits that fail when what they watch stops moving, not when a total time is up.

Why: a total bound on a wait ("300 rows within 60 s", "120 confirms within 60 s") counts every
step of a run, and a loaded 2-core machine stretches each of them: such bounds failed healthy
runs (docs/testing.md, flaky tests). What these waits guard against is a stall (a source that
stopped delivering, a store that stopped confirming), and a stall shows as a sign of progress
that no longer changes: a row count, confirms, files, a counter. So a wait here fails only when
its sign has not changed for ``stall_s``, and its message names the sign and the last value
seen. The test's pytest timeout stays the outer guard.

``Watch`` is the sign and its clock, checked from any loop (a blocking poll or an ``async``
test's own turns); ``wait_until`` is the blocking poll around it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

STALL_S = 60.0


class Watch:
    """A sign of progress, sampled by ``check``, which fails once it has not changed for
    ``stall_s``. ``sample`` returns any value that compares equal while nothing moved (a count,
    a tuple of counts and sizes)."""

    def __init__(
        self,
        what: str,
        sign: str,
        sample: Callable[[], object],
        stall_s: float = STALL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what  # what the test waits for: "300 republished"
        self.sign = sign  # what shows progress: "ready in the target queue"
        self.sample = sample
        self.stall_s = stall_s
        self.clock = clock
        self.last = sample()
        self.since = clock()

    def check(self) -> None:
        """Samples the sign; AssertionError when it has stayed the same for ``stall_s``."""
        now = self.sample()
        if now != self.last:
            self.last, self.since = now, self.clock()
        elif self.clock() - self.since >= self.stall_s:
            raise AssertionError(
                f"{self.what}: stalled, no progress for {self.stall_s:.0f} s "
                f"({self.sign}: last seen {now!r})"
            )


def wait_until(
    reached: Callable[[], Any],
    watch: Watch,
    *,
    also: Callable[[], None] | None = None,
    poll_s: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """Polls ``reached()`` until it is truthy and returns its value. Between polls ``also()``
    (a check that raises on a failure the wait cannot outlast: a failed query, an exited child)
    and ``watch.check()``, which fails when the watched sign has stalled."""
    while not (value := reached()):
        if also is not None:
            also()
        watch.check()
        sleep(poll_s)
    return value
