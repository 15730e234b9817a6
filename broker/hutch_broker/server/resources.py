"""Resource alarms at run time: memory watermark and disk free limit (MEM-3..MEM-7).

Samples ``/proc/self/status`` and the data directory's free space once a
second (and at once after a watermark change), decides with the pure
``hutch_broker.memory`` functions, and on a transition tells the sessions:
blocking is lazy (a connection is blocked at its next publish, by dispatch),
unblocking is eager (every blocked connection gets ``connection.unblocked``
and its held publish completes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hutch_broker import memory

log = logging.getLogger(__name__)

# A fast publisher can outrun a once-a-second sample: the server samples again after every
# 1/32 of the watermark's worth of bytes in (``sample_after_bytes``), and at least 1 MiB.
SAMPLES_PER_WATERMARK = 32
MIN_SAMPLE_AFTER_BYTES = 1024 * 1024


class ResourceMonitor:
    """Implements dispatch's ``AlarmState`` and the admin API's ``MemoryMonitor``."""

    def __init__(
        self,
        *,
        watermark: memory.Watermark,
        total_memory: int,
        data_dir: Path,
        disk_free_limit: int,
        on_clear: Callable[[], None] = lambda: None,
        on_paging: Callable[[bool], None] = lambda active: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.on_paging = on_paging
        # What the end of every tick reads (``sample_after_bytes``) is derived from these two
        # once, when one of them is set, not per tick (two property calls a tick, 1-3 % of
        # the samples of a profiled confirm run).
        self.mem_limit = 0  # the watermark's limit in bytes (0: disabled)
        self.sample_after_bytes = MIN_SAMPLE_AFTER_BYTES
        self._watermark = watermark
        self._total_memory = total_memory
        self._limit_changed()
        self.data_dir = data_dir
        self.disk_free_limit = disk_free_limit
        self.on_clear = on_clear
        self.mem_used = 0
        self.disk_free = 0
        self._memory_alarm = False
        self._disk_alarm = False
        # Read by every publish (``Session._process``): a plain attribute, kept in step by the
        # two alarms' setters, since a property was one Python call per message.
        self.publishing_blocked = False
        self.heap_trim = memory.HeapTrim()  # freed memory goes back even under the watermark

    # -- AlarmState / MemoryMonitor -------------------------------------------

    @property
    def memory_alarm(self) -> bool:
        return self._memory_alarm

    @memory_alarm.setter
    def memory_alarm(self, value: bool) -> None:
        self._set_alarms(memory_alarm=value, disk_alarm=self._disk_alarm)

    @property
    def disk_alarm(self) -> bool:
        return self._disk_alarm

    @disk_alarm.setter
    def disk_alarm(self, value: bool) -> None:
        self._set_alarms(memory_alarm=self._memory_alarm, disk_alarm=value)

    def _set_alarms(self, *, memory_alarm: bool, disk_alarm: bool) -> None:
        """The one place the alarms change, so `publishing_blocked` never lags either."""
        self._memory_alarm, self._disk_alarm = memory_alarm, disk_alarm
        self.publishing_blocked = memory_alarm or disk_alarm

    @property
    def block_reason(self) -> str:
        return "low on memory" if self.memory_alarm else "low on disk"

    @property
    def watermark(self) -> memory.Watermark:
        return self._watermark

    @watermark.setter
    def watermark(self, watermark: memory.Watermark) -> None:
        self._watermark = watermark
        self._limit_changed()

    @property
    def total_memory(self) -> int:
        return self._total_memory

    @total_memory.setter
    def total_memory(self, total_memory: int) -> None:
        self._total_memory = total_memory
        self._limit_changed()

    def _limit_changed(self) -> None:
        self.mem_limit = self._watermark.limit(self._total_memory)
        self.sample_after_bytes = max(
            MIN_SAMPLE_AFTER_BYTES, self.mem_limit // SAMPLES_PER_WATERMARK
        )

    @property
    def alarm(self) -> bool:
        return self.memory_alarm

    def settings_json(self) -> dict[str, Any]:
        return self.watermark.as_json()

    def set_watermark(self, body: dict[str, Any]) -> None:
        """MEM-7: a runtime change, not persisted; applied at once (admin validated it)."""
        self.watermark = memory.Watermark.from_setting(body)
        log.info(
            "memory high watermark set to %s (limit %d bytes)",
            self.watermark.as_json(),
            self.mem_limit,
        )
        self.sample()

    @property
    def paging_wanted(self) -> bool:
        """Page bodies out above half the watermark (RabbitMQ's paging ratio)."""
        return self._over_paging_threshold(self.mem_used)

    def _over_paging_threshold(self, used: int) -> bool:
        if self.watermark.disabled:
            return False
        return used > memory.paging_threshold(self.watermark, self.total_memory)

    def alarms(self) -> list[str]:
        found = []
        if self.memory_alarm:
            found.append("memory")
        if self.disk_alarm:
            found.append("disk")
        return found

    # -- sampling ---------------------------------------------------------------

    def sample(self) -> None:
        was_blocked = self.publishing_blocked
        used = _read_rss_anon()
        now = self.clock()
        trim_due = self.heap_trim.due(used, now)
        if trim_due or self._over_paging_threshold(used):
            # Freed heap pages (a drained queue, paged-out bodies, a hostile client's half-sent
            # messages) stay in RSS until malloc returns them. Trim before deciding, so the
            # alarm clears on the first sample after the drain instead of the one after it.
            _release_freed_memory()
            trimmed = _read_rss_anon()
            self.heap_trim.trimmed(trimmed, now)
            used = trimmed
        self.mem_used = used
        self.disk_free = _disk_free(self.data_dir)
        memory_alarm = memory.is_alarmed(self.watermark, self.mem_used, self.total_memory)
        disk_alarm = self.disk_free < self.disk_free_limit
        _say_if_changed(
            "memory", self.memory_alarm, memory_alarm, "used", self.mem_used, self.mem_limit
        )
        _say_if_changed(
            "disk", self.disk_alarm, disk_alarm, "free", self.disk_free, self.disk_free_limit
        )
        self._set_alarms(memory_alarm=memory_alarm, disk_alarm=disk_alarm)
        self.on_paging(self.paging_wanted)
        if was_blocked and not self.publishing_blocked:
            self.on_clear()


def _say_if_changed(alarm: str, was: bool, now: bool, measure: str, value: int, limit: int) -> None:
    """One warning line when an alarm is set or cleared, not one per sample while it holds."""
    if now != was:
        verb = "set" if now else "cleared"
        log.warning("%s alarm %s: %s %d, limit %d", alarm, verb, measure, value, limit)


def _read_rss_anon() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            return memory.parse_rss_anon(status.read())
    except OSError:
        return 0


def _disk_free(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    return trim if callable(trim) else None


_MALLOC_TRIM = _load_malloc_trim()


def _release_freed_memory() -> None:
    """glibc keeps freed heap pages; malloc_trim returns them to the OS (no-op elsewhere)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
