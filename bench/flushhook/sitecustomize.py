"""Counts what each AMQP connection's flush hands the socket, in a broker started by
bench/flush_stats.py (which puts this folder on the broker's PYTHONPATH).

Why: the profile (docs/bench/profile.md) puts the vhost workers' extra CPU per message on one
call, ``transport.writelines`` in ``AMQPConnection.flush``, with the same system calls per
message as one loop. What a call costs depends on what it carries (how many pieces, how many
bytes) and on whether uvloop's own buffer already holds unsent bytes (then the call copies into
that buffer instead of writing). This counts those per process, and times the flush and its
``writelines`` call (the connection is given a transport that times that one method), from
outside the product: the broker's code is wrapped here at start, never changed.

Python imports ``sitecustomize`` at every start, so this does nothing unless
``HUTCH_FLUSH_STATS`` names a folder; then each process writes its counts to
``flush-<pid>.json`` there every half second (a worker is stopped with the broker, and a file
rewritten while it runs needs no exit hook).
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any


class _TimedTransport:
    """A connection's transport with its ``writelines`` timed; everything else passed through
    (uvloop's transport is a C type whose methods cannot be replaced on it)."""

    def __init__(self, transport: Any, counts: Counter[str]) -> None:
        self._transport = transport
        self._counts = counts

    def writelines(self, data: Any) -> None:
        counts = self._counts
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        self._transport.writelines(data)
        counts["write_wall_ns"] += time.perf_counter_ns() - wall
        counts["write_cpu_ns"] += time.thread_time_ns() - cpu
        after = resource.getrusage(resource.RUSAGE_THREAD)
        # The kernel splits a thread's CPU into user and system time by sampling at its
        # clock tick, so these two are right only summed over many calls.
        counts["write_user_us"] += round((after.ru_utime - usage.ru_utime) * 1e6)
        counts["write_sys_us"] += round((after.ru_stime - usage.ru_stime) * 1e6)
        counts["writes"] += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _install(folder: Path) -> None:
    from hutch_broker.server import amqp  # noqa: PLC0415 (only when asked: see above)

    counts: Counter[str] = Counter()
    sizes: Counter[int] = Counter()  # flushes by bytes, in powers of two (the bucket's floor)
    original_flush = amqp.AMQPConnection.flush
    original_made = amqp.AMQPConnection.connection_made

    def connection_made(self: amqp.AMQPConnection, transport: Any) -> None:
        original_made(self, _TimedTransport(transport, counts))

    def flush(self: amqp.AMQPConnection) -> None:
        session, transport = self.session, self.transport
        pieces = session.proto.pending_output if session is not None else ()
        if not pieces or transport is None or transport.is_closing():
            original_flush(self)
            return
        size = sum(map(len, pieces))
        buffered_before = transport.get_write_buffer_size()
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        original_flush(self)
        counts["flush_wall_ns"] += time.perf_counter_ns() - wall
        counts["flush_cpu_ns"] += time.thread_time_ns() - cpu
        counts["flushes"] += 1
        counts["frames"] += len(pieces)
        counts["bytes"] += size
        counts["buffered_before"] += buffered_before > 0
        counts["buffered_after"] += transport.get_write_buffer_size() > 0
        sizes[1 << (size.bit_length() - 1)] += 1

    amqp.AMQPConnection.connection_made = connection_made  # type: ignore[method-assign]
    amqp.AMQPConnection.flush = flush  # type: ignore[method-assign]
    target = folder / f"flush-{os.getpid()}.json"

    def dump() -> None:
        while True:
            time.sleep(0.5)
            snapshot = {"counts": dict(counts), "sizes": {str(k): v for k, v in sizes.items()}}
            partial = target.with_suffix(".new")
            partial.write_text(json.dumps(snapshot))
            os.replace(partial, target)

    threading.Thread(target=dump, name="flush-stats", daemon=True).start()


if os.environ.get("HUTCH_FLUSH_STATS"):
    _install(Path(os.environ["HUTCH_FLUSH_STATS"]))
