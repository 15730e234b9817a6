"""What the management API needs from the resource monitor (MEM-6, MEM-7, API-2, API-9).

The watermark decision and the sampling loop belong to the server; the API
only reads ``mem_used``/``mem_limit``/``alarm`` and the sampled ``disk_free``,
and forwards a validated runtime change.  ``MemoryMonitor`` is that narrow
interface (the API reads the monitor's once-a-second disk sample rather than
calling statvfs on every request), and ``FixedMemory`` is the trivial stand-in
used when the server passes none (tests, AMQP-only embedding): it never
samples, so it never alarms unless its ``mem_used`` or ``disk_free`` is set by hand.
"""

from __future__ import annotations

import math
from typing import Any, Final, Protocol

from hutch_broker import config
from hutch_broker.admin import errors

DEFAULT_TOTAL_MEMORY: Final = 1024**3  # MEM-1's last fallback


class MemoryMonitor(Protocol):
    @property
    def mem_used(self) -> int: ...

    @property
    def mem_limit(self) -> int: ...

    @property
    def alarm(self) -> bool: ...

    @property
    def disk_free(self) -> int:
        """Free bytes on the data directory's file system, as last sampled."""
        ...

    def settings_json(self) -> dict[str, Any]:
        """``{"relative": 0.4}`` or ``{"absolute": 123456789}``."""
        ...

    def set_watermark(self, body: dict[str, Any]) -> None:
        """Apply a body already checked by ``parse_watermark`` (not persisted)."""
        ...


class FixedMemory:
    """A monitor with a fixed ``total_memory`` and a hand-set ``mem_used``."""

    def __init__(
        self,
        *,
        total_memory: int = DEFAULT_TOTAL_MEMORY,
        mem_used: int = 0,
        disk_free: int = 2**60,
    ) -> None:
        self.total_memory = total_memory
        self.mem_used = mem_used
        self.disk_free = disk_free
        self._setting: dict[str, Any] = {"relative": 0.4}

    @property
    def mem_limit(self) -> int:
        if "absolute" in self._setting:
            return int(self._setting["absolute"])
        return math.floor(float(self._setting["relative"]) * self.total_memory)

    @property
    def alarm(self) -> bool:
        """MEM-2: a watermark of 0 disables the monitor."""
        return self.mem_limit > 0 and self.mem_used > self.mem_limit

    def settings_json(self) -> dict[str, Any]:
        return dict(self._setting)

    def set_watermark(self, body: dict[str, Any]) -> None:
        self._setting = dict(body)


def parse_watermark(body: dict[str, Any]) -> dict[str, Any]:
    """MEM-7: exactly one of ``relative`` (0..1) or ``absolute`` (bytes, or "512MiB")."""
    keys = set(body) & {"relative", "absolute"}
    if len(keys) != 1 or set(body) - keys:
        raise errors.bad_request("expected exactly one of 'relative' or 'absolute'")
    if "relative" in body:
        value = body["relative"]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise errors.bad_request(f"relative watermark must be a number, got {value!r}")
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise errors.bad_request(f"relative watermark must be between 0 and 1, got {value}")
        return {"relative": float(value)}
    return {"absolute": _absolute(body["absolute"])}


def _absolute(value: Any) -> int:
    if isinstance(value, str):
        try:
            return config.parse_size(value)
        except config.ConfigError as exc:
            raise errors.bad_request(f"absolute watermark: {exc}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise errors.bad_request(f"absolute watermark must be a byte count, got {value!r}")
    return value
