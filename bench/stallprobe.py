"""hutch-broker with a stall probe: how much CPU each loop turn, timer and gc pass holds the loop.

Why: a latency tail of tens of milliseconds at a light load (#32) comes from something that
holds the event loop, and on a shared machine wall time says more about the neighbours than
about the broker. CPU time does not: a callback that burns 5 ms of the loop thread's CPU
(``time.thread_time``) delays every message behind it, whatever else runs. asyncio's debug
mode is too heavy at 10k msg/s and uvloop has no per-callback hook, so this wraps the few
places the broker's work enters from the loop, and times gc passes with ``gc.callbacks``:

- ``turn``: the loop thread's CPU between two wake-ups of a 1 ms timer (a loop iteration runs
  the due timers first, so a large figure is one iteration's callbacks, whichever they were),
  and ``turn_late``, how late in wall time that timer woke (in the ``over`` columns too,
  though it is not CPU: late without CPU is waiting for a core or in a system call);
- ``read`` (a connection's ``data_received``: parsing, routing, inline deliveries),
  ``end_of_tick`` (saves, confirms, the writes), ``sync_done``;
- the timers: ``memory_sample`` (``ResourceMonitor.sample``, malloc_trim included),
  ``tick_connections``, ``store_sync_timer``, ``pager_sync`` (once a second), ``expiry_tick``
  (every 100 ms);
- ``gc0``/``gc1``/``gc2``: each collection by generation.

The broker itself is unchanged: the probe patches those methods in this process before the
broker starts, so nothing of it is in hutch-broker's code or costs a production broker
anything. Every second it writes its counts to the JSON file named first; SIGUSR1 resets
them (``bench/stalls.py`` sends it when the measured run starts).

    python bench/stallprobe.py OUT.json -- --amqp-port 5673 --http-port 15673 --data-dir d
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

THRESHOLDS_MS = (1, 2, 5, 10, 20)
EVENTS_KEPT = 5000  # events of 2 ms or more kept with their time, for their period
EVENT_MS = 2.0
TURN_TIMER_S = 0.001


class Stalls:
    """Per name: how many, total and largest CPU, and how many took each threshold or more."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        self.since = self.clock()
        self.names: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[float, str, float]] = []  # (s since reset, name, CPU ms)
        self.own = 0.0  # CPU the probe's report took since ``time_turns`` last looked

    def take_own(self) -> float:
        own, self.own = self.own, 0.0
        return own

    def add(self, name: str, cpu_s: float) -> None:
        cpu_ms = cpu_s * 1000.0
        entry = self.names.get(name)
        if entry is None:
            entry = self.names[name] = {
                "count": 0,
                "cpu_ms": 0.0,
                "max_ms": 0.0,
                "over_ms": dict.fromkeys(THRESHOLDS_MS, 0),
            }
        entry["count"] += 1
        entry["cpu_ms"] += cpu_ms
        entry["max_ms"] = max(entry["max_ms"], cpu_ms)
        over = entry["over_ms"]
        for threshold in THRESHOLDS_MS:
            if cpu_ms >= threshold:
                over[threshold] += 1
        if cpu_ms >= EVENT_MS and len(self.events) < EVENTS_KEPT:
            self.events.append((round(self.clock() - self.since, 3), name, round(cpu_ms, 3)))

    def snapshot(self) -> dict[str, Any]:
        return {
            "seconds": round(self.clock() - self.since, 3),
            "names": {
                name: entry | {"over_ms": {str(k): v for k, v in entry["over_ms"].items()}}
                for name, entry in sorted(self.names.items())
            },
            "events": list(self.events),
        }


def timed(stalls: Stalls, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with its CPU time on the calling thread added to ``name``."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            stalls.add(name, time.thread_time() - began)

    return wrapper


class GcTimer:
    """A ``gc.callbacks`` entry: each collection's CPU, named by its generation."""

    def __init__(self, stalls: Stalls) -> None:
        self.stalls = stalls
        self.began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.began = time.thread_time()
        else:
            self.stalls.add(f"gc{info['generation']}", time.thread_time() - self.began)


async def time_turns(stalls: Stalls, interval: float = TURN_TIMER_S) -> None:
    """The loop thread's CPU between two wake-ups of a short timer (``turn``): at 1 ms a figure
    of several ms is one loop iteration's work (or that of the few between two wake-ups), less
    the probe's own report. Beside it, how late the timer woke in wall time (``turn_late``):
    late with little CPU is the process waiting for a core, or in a system call, not working."""
    cpu, wall = time.thread_time(), time.monotonic()
    while True:
        await asyncio.sleep(interval)
        now_cpu, now_wall = time.thread_time(), time.monotonic()
        stalls.add("turn", now_cpu - cpu - stalls.take_own())
        stalls.add("turn_late", max(0.0, now_wall - wall - interval))
        cpu, wall = time.thread_time(), time.monotonic()


def gc_state() -> dict[str, Any]:
    return {
        "freeze_count": gc.get_freeze_count(),
        "threshold": list(gc.get_threshold()),
        "count": list(gc.get_count()),
        "collections": [item["collections"] for item in gc.get_stats()],
    }


def rss_kib() -> dict[str, int]:
    found = {}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "VmHWM"):
                    found[key] = int(value.split()[0])
    except OSError:
        pass
    return found


def nodelay(connections: Any) -> list[int]:
    """TCP_NODELAY of each client socket: without it Nagle holds small writes for an ACK."""
    found = []
    for connection in list(connections):
        transport = getattr(connection, "transport", None)
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None:
            found.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    return found


def write(path: Path, document: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(document))
    os.replace(partial, path)


def install(out: Path) -> Stalls:
    """Patch the broker's entry points and timers, before anything of it runs."""
    from hutch_broker.model.broker import Broker  # noqa: PLC0415 - the broker's path is set now
    from hutch_broker.model.paging import Pager  # noqa: PLC0415
    from hutch_broker.server.amqp import AMQPConnection  # noqa: PLC0415
    from hutch_broker.server.app import BrokerServer  # noqa: PLC0415
    from hutch_broker.server.resources import ResourceMonitor  # noqa: PLC0415

    stalls = Stalls()
    patches = [
        (AMQPConnection, "data_received", "read"),
        (BrokerServer, "_end_of_tick", "end_of_tick"),
        (BrokerServer, "_sync_done", "sync_done"),
        (BrokerServer, "_tick_connections", "tick_connections"),
        (BrokerServer, "_sync_lazily", "store_sync_timer"),
        (ResourceMonitor, "sample", "memory_sample"),
        (Pager, "sync", "pager_sync"),
        (Broker, "tick", "expiry_tick"),
    ]
    for owner, attribute, name in patches:
        setattr(owner, attribute, timed(stalls, name, getattr(owner, attribute)))
    gc.callbacks.append(GcTimer(stalls))
    signal.signal(signal.SIGUSR1, lambda signum, frame: stalls.reset())
    started = BrokerServer.start

    async def start(server: BrokerServer) -> None:
        await started(server)
        loop = asyncio.get_running_loop()
        server.stall_probe_tasks = [  # kept: the loop holds tasks weakly
            loop.create_task(time_turns(stalls)),
            loop.create_task(report(server, stalls, out)),
        ]

    BrokerServer.start = start  # type: ignore[method-assign]
    return stalls


async def report(server: Any, stalls: Stalls, out: Path) -> None:
    while True:
        await asyncio.sleep(1.0)
        began = time.thread_time()
        write(
            out,
            stalls.snapshot()
            | {"gc": gc_state(), "rss_kib": rss_kib(), "nodelay": nodelay(server.connections)},
        )
        stalls.own += time.thread_time() - began


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        sys.stderr.write("usage: stallprobe.py OUT.json -- <hutch-broker arguments>\n")
        return 2
    out = Path(argv[0])
    install(out)
    from hutch_broker import __main__ as broker_main  # noqa: PLC0415

    return broker_main.main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
