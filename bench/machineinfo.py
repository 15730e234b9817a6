"""What a results file says about the machine beyond its core count: the CPU and how fast it
runs Python.

Why: the same bench gave Hutch 107.6k msg/s at 9.2 µs of broker CPU a message in scenario 1 on
one 2-core machine (an Intel Xeon) and 27.2k at 37 µs on another (an AMD EPYC at 2 GHz), while
RabbitMQ's CPU a message grew 2.8x between them, not 4x. Without the CPU's name and a figure
for its Python speed in the JSON, two results files cannot say whether a change or the machine
moved a figure. ``python_loop_ms`` is the CPU time of one fixed pure-Python loop (the best of
three), a rough scale for the interpreter's speed on that machine, not a benchmark of its own.
"""

from __future__ import annotations

import time
from pathlib import Path

LOOP_ITERATIONS = 2_000_000


def cpu_model(cpuinfo: str) -> str | None:
    """The first ``model name`` of a ``/proc/cpuinfo`` text (pure)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip() or None
    return None


def this_cpu_model(path: Path = Path("/proc/cpuinfo")) -> str | None:
    try:
        return cpu_model(path.read_text())
    except OSError:
        return None


def _loop(count: int) -> int:
    total = 0
    for value in range(count):
        total += value ^ (value >> 3)
    return total


def python_loop_ms(iterations: int = LOOP_ITERATIONS, repeats: int = 3) -> float:
    """The best CPU time of ``repeats`` runs of a fixed loop, in ms (the thread's clock, so a
    busy neighbour lengthens it only through the caches, not by taking the core)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        _loop(iterations)
        best = min(best, time.thread_time() - started)
    return round(best * 1000, 1)
