"""What a results file says about the machine beyond its core count: the CPU and how fast it
runs Python.

Why: the same bench gave Hutch 107.6k msg/s at 9.2 µs of broker CPU a message in scenario 1 on
one 2-core machine (an Intel Xeon) and 27.2k at 37 µs on another (an AMD EPYC at 2 GHz), while
RabbitMQ's CPU a message grew 2.8x between them, not 4x. Without the CPU's name and a figure
for its Python speed in the JSON, two results files cannot say whether a change or the machine
moved a figure. ``python_loop_ms`` is the CPU time of one fixed pure-Python loop (the best of
three), a rough scale for the interpreter's speed on that machine, not a benchmark of its own.

``parallel_slowdown`` is the same loop's CPU time in two processes at once over one alone:
about 1.0 when the two CPUs the machine reports are two cores, up to about 2 when they are the
two hardware threads of one core (a virtual machine cannot tell from its topology, which may
say "2 cores, 1 thread each" either way). Every scaling figure on a 2-CPU machine (a second
vhost worker, a second Spark executor) depends on it, and a busy neighbour raises it too.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.queues import SimpleQueue
from multiprocessing.synchronize import Barrier
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


def _timed_loop(iterations: int, start: Barrier, results: SimpleQueue[float]) -> None:
    start.wait()
    started = time.thread_time()
    _loop(iterations)
    results.put(time.thread_time() - started)


def parallel_slowdown(
    iterations: int = LOOP_ITERATIONS, workers: int = 2, alone_ms: float | None = None
) -> float:
    """The loop's mean CPU time in ``workers`` processes started together, over its best time
    alone (``alone_ms``, ``python_loop_ms`` of the same iterations, measured here if not
    given) (module doc); rounded to 0.01."""
    context = multiprocessing.get_context("fork")
    alone = (python_loop_ms(iterations) if alone_ms is None else alone_ms) / 1000
    start = context.Barrier(workers)
    results = context.SimpleQueue()
    processes = [
        context.Process(target=_timed_loop, args=(iterations, start, results))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    times = [results.get() for _ in processes]
    for process in processes:
        process.join()
    return round(sum(times) / len(times) / alone, 2)


def facts() -> dict[str, object]:
    """The CPU's name and both Python figures, for a results file (measured when called: a
    bench calls it before its rounds, on the machine as it is then)."""
    alone = python_loop_ms()
    return {
        "cpu_model": this_cpu_model(),
        "python_loop_ms": alone,
        "parallel_slowdown": parallel_slowdown(alone_ms=alone),  # the loop alone timed once
    }
