"""The memory high watermark decision (MEM-1..MEM-3), pure and clock-free.

The server samples the process's memory about once a second and asks this
module two questions: what is the limit for this setting, and is the broker
over it?  Keeping the arithmetic here means the operator's translator and the
broker agree on one definition, and the tests need no real memory pressure.
"""

from __future__ import annotations

import gc
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

FALLBACK_TOTAL_MEMORY: Final = 1024**3  # the seed's fallback when nothing else is known
PAGING_RATIO: Final = 0.5  # vm_memory_high_watermark_paging_ratio: paging starts at half
_CGROUP_V2: Final = Path("/sys/fs/cgroup/memory.max")
_CGROUP_V1: Final = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")
_UNLIMITED_V1: Final = 1 << 60


@dataclass(frozen=True, slots=True)
class Watermark:
    """Either a fraction of total memory or an absolute number of bytes."""

    relative: float | None = 0.4
    absolute: int | None = None

    def limit(self, total_memory: int) -> int:
        if self.absolute is not None:
            return self.absolute
        return math.floor((self.relative or 0.0) * total_memory)

    @property
    def disabled(self) -> bool:
        """MEM-2: a value of 0 turns the monitor off; it never alarms."""
        return (self.absolute is not None and self.absolute == 0) or (
            self.absolute is None and not self.relative
        )

    @classmethod
    def from_setting(cls, setting: dict[str, Any]) -> Watermark:
        """From an already validated ``{"relative": f}`` or ``{"absolute": n}``."""
        if "absolute" in setting:
            return cls(relative=None, absolute=int(setting["absolute"]))
        return cls(relative=float(setting["relative"]))

    def as_json(self) -> dict[str, Any]:
        if self.absolute is not None:
            return {"absolute": self.absolute}
        return {"relative": self.relative}


def is_alarmed(watermark: Watermark, mem_used: int, total_memory: int) -> bool:
    """MEM-3: alarm while over the limit; no hysteresis."""
    if watermark.disabled:
        return False
    return mem_used > watermark.limit(total_memory)


def paging_threshold(watermark: Watermark, total_memory: int, ratio: float = PAGING_RATIO) -> int:
    """Memory use above which queue bodies are paged to disk."""
    return math.floor(watermark.limit(total_memory) * ratio)


@dataclass(frozen=True, slots=True)
class DeliveryBudget:
    """How much delivery-side memory one connection may hold, derived from the watermark.

    A consumer that stops reading its socket, or that sits on many large unacked messages,
    must cost its own deliveries and nothing else; left unbounded, its frames and held bodies
    trip the memory alarm, which blocks every publisher of every tenant. Three bounds:

    - ``output_slice``: bytes of deliveries a connection may queue between two writes to its
      socket. Once reached, its consumers get nothing more until the end of the loop turn
      writes them out; then they resume if the socket took the bytes;
    - ``write_high``/``write_low``: the transport's write-buffer marks. Above ``write_high``
      the socket is not draining: no deliveries until it is back under ``write_low``;
    - ``held_per_connection``: bodies of unacked messages kept in memory for redelivery
      (those the store does not hold). A connection over it gets no new deliveries (but to
      its no-ack consumers) until it acks, rejects or recovers some;
    - ``output_total``/``held_total``: the same over all connections (``DeliveryTotals``).
      While a total is over, the connections holding a large share of it (``output_must_wait``,
      ``held_must_wait``) get no more deliveries; those that hold little are never stopped by
      the others.
    """

    mem_limit: int  # the watermark limit it was derived from
    output_slice: int
    write_high: int
    write_low: int
    held_per_connection: int
    output_total: int
    held_total: int


MIN_WRITE_HIGH: Final = 256 * 1024
MAX_WRITE_HIGH: Final = 4 * 1024 * 1024
MIN_HELD: Final = 1024 * 1024


def delivery_budget(mem_limit: int) -> DeliveryBudget:
    """The bounds for a watermark limit in bytes (0, a disabled watermark: as for 1 GiB x 0.4).

    The write marks are 1/64 of the limit (within 256 KiB..4 MiB, 4 MiB being what a fast
    consumer on loopback needs for full speed), unacked bodies 1/8 of it per connection, and
    each kind 1/4 of it over all connections: the alarm stays out of reach of any number of
    misbehaving consumers.
    """
    limit = mem_limit or Watermark().limit(FALLBACK_TOTAL_MEMORY)
    write_high = min(max(limit // 64, MIN_WRITE_HIGH), MAX_WRITE_HIGH)
    return DeliveryBudget(
        mem_limit=mem_limit,
        output_slice=write_high // 4,
        write_high=write_high,
        write_low=write_high // 4,
        held_per_connection=max(limit // 8, MIN_HELD),
        output_total=limit // 4,
        held_total=limit // 4,
    )


@dataclass(slots=True)
class DeliveryTotals:
    """Buffered output and held unacked bodies over all connections, as each last reported
    them (at its writes and once a second)."""

    output: int = 0
    held: int = 0


def output_must_wait(budget: DeliveryBudget, totals: DeliveryTotals, *, output: int) -> bool:
    """Should a connection with ``output`` bytes unsent get its write marks lowered to
    ``write_low``? Only while the total is over its bound and its own buffer is over
    ``write_low``: a consumer whose socket drains keeps its buffer under that and is never
    slowed down by the others."""
    return output > budget.write_low and totals.output > budget.output_total


def held_must_wait(budget: DeliveryBudget, totals: DeliveryTotals, *, held: int) -> bool:
    """Should a connection holding ``held`` bytes of unacked bodies get no more deliveries for
    now? Only while the total is over its bound and it holds over a quarter of its own budget:
    one that acks as it goes is never slowed down by the others."""
    return held > budget.held_per_connection // 4 and totals.held > budget.held_total


TRIM_SLACK: Final = 16 * 1024 * 1024  # RssAnon above its lowest level worth a malloc_trim
TRIM_BACKOFF_MAX: Final = 8.0  # seconds between trims while RssAnon stays up


class HeapTrim:
    """When to hand freed heap pages back to the kernel (``malloc_trim``), from RssAnon alone.

    Why: glibc keeps what the broker frees for its next allocations and gives pages back by
    itself only from the top of its heap. One burst of large short-lived allocations (clients
    leaving 1 MiB of a message half-sent on each of 20 channels) left RSS at 180 MiB from
    47 MiB for good, 138 MiB of it free inside malloc. ``malloc_trim`` returns it, at a cost:
    it walks every free chunk and holds the loop 0.5-37 ms (more when it returns more), and
    pages it returns during a burst are faulted back in at once. So it runs only while
    RssAnon is over ``TRIM_SLACK`` above the lowest level seen, and each trim doubles the time
    before the next, up to ``TRIM_BACKOFF_MAX`` seconds; the wait starts again at one second
    once RssAnon has stayed within the slack for that long. Freed memory goes back at most 8 s
    after a burst, and a broker that really holds its memory (long queues), or churns it, pays
    one walk per 8 s, however often it samples.
    """

    __slots__ = ("interval", "lowest", "not_before", "rest_since")

    def __init__(self) -> None:
        self.lowest: int | None = None  # RssAnon of the broker at rest: the lowest seen
        self.interval = 1.0  # seconds from this trim to the next
        self.not_before = 0.0  # monotonic time before which no trim runs
        self.rest_since: float | None = None  # since when RssAnon is within the slack

    def due(self, used: int, now: float) -> bool:
        """Called at every sample with its RssAnon: should this sample trim first?"""
        if self.lowest is None or used < self.lowest:
            self.lowest = used
        if used - self.lowest <= TRIM_SLACK:
            if self.rest_since is None:
                self.rest_since = now
            elif now - self.rest_since >= TRIM_BACKOFF_MAX:
                self.interval, self.not_before = 1.0, 0.0
            return False
        self.rest_since = None
        return now >= self.not_before

    def trimmed(self, after: int, now: float) -> None:
        """A trim at ``now`` brought RssAnon to ``after``."""
        self.lowest = after if self.lowest is None else min(self.lowest, after)
        self.not_before = now + self.interval
        self.interval = min(2 * self.interval, TRIM_BACKOFF_MAX)


def detect_total_memory(configured: int | None = None) -> int:
    """MEM-1: config (the operator's memory request), cgroup limit, MemTotal, 1 GiB."""
    if configured:
        return configured
    for path in (_CGROUP_V2, _CGROUP_V1):
        value = _read_int(path)
        if value is not None and 0 < value < _UNLIMITED_V1:
            return value
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return FALLBACK_TOTAL_MEMORY


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def parse_rss_anon(status_text: str) -> int:
    """Bytes of anonymous resident memory from /proc/<pid>/status (MEM-3)."""
    for line in status_text.splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def settle_startup_heap() -> None:
    """Freezes what start-up allocated and makes full collections rare.

    Queued messages are acyclic, but millions of them make every full collection walk the
    heap: collect rarely, and never scan what start-up allocated. Called once a broker process
    (the single one or a vhost worker) is serving.
    """
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
