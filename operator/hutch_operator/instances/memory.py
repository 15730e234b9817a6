"""Memory high watermark and disk free limit from a Broker's resources.

Contract: docs/contracts/operator.md#memory-plan.

Why pure: the numbers end up in the broker's config and in status, and the table in the design
is the test. The basis is the memory *request* (the only memory the scheduler guarantees), else
the limit, else the broker's own detection at runtime; the result is an absolute byte count so it
cannot drift between broker versions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)$")

DISK_FREE_FLOOR = 50_000_000
DISK_FREE_FRACTION = Decimal("0.05")
WATERMARK_WARN_ABOVE = Decimal("0.5")

Basis = Literal["Request", "Limit", "Runtime"]


def parse_quantity(value: int | float | str) -> Decimal:
    """A Kubernetes quantity (``512Mi``, ``1G``, ``250m``, ``1e3``) as an exact Decimal."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = Decimal(match[1]), match[2]
    if suffix in _BINARY:
        return number * (Decimal(1024) ** _BINARY[suffix])
    if suffix[:1] in {"e", "E"}:
        return number * (Decimal(10) ** int(suffix[1:]))
    return number * (Decimal(10) ** _DECIMAL[suffix])


def quantity_bytes(value: int | float | str) -> int:
    """Whole bytes (rounded up, as the kubelet does for fractional byte quantities)."""
    return math.ceil(parse_quantity(value))


@dataclass(frozen=True)
class WatermarkPlan:
    basis: Basis
    basis_bytes: int | None
    relative: Decimal
    high_watermark_bytes: int | None
    #: (reason, message) pairs for the NoWarnings condition, most important first.
    warnings: list[tuple[str, str]] = field(default_factory=list)

    def config_line(self) -> str:
        if self.high_watermark_bytes is None:
            return f"vm_memory_high_watermark.relative = {self.relative}"
        return f"vm_memory_high_watermark.absolute = {self.high_watermark_bytes}"

    def status(self) -> dict[str, object]:
        status: dict[str, object] = {"basis": self.basis, "relative": str(self.relative)}
        if self.basis_bytes is not None:
            status["basisBytes"] = self.basis_bytes
            status["highWatermarkBytes"] = self.high_watermark_bytes
        return status


def watermark(resources: dict[str, dict[str, int | str]], relative: float) -> WatermarkPlan:
    """The watermark for the broker container's ``resources`` and fraction ``relative``."""
    ratio = Decimal(str(relative))
    request = resources.get("requests", {}).get("memory")
    limit = resources.get("limits", {}).get("memory")
    warnings: list[tuple[str, str]] = []
    request_bytes = quantity_bytes(request) if request is not None else None
    limit_bytes = quantity_bytes(limit) if limit is not None else None
    if request_bytes is not None and limit_bytes is not None and request_bytes != limit_bytes:
        warnings.append(
            (
                "MemoryRequestAndLimitDifferent",
                f"memory request {request} differs from limit {limit}: above the request the "
                "pod is first to be evicted; set them equal",
            )
        )
    if ratio > WATERMARK_WARN_ABOVE:
        warnings.append(
            ("WatermarkAboveHalf", f"memoryHighWatermark {ratio} is above 0.5; keep it at most 0.5")
        )
    if request_bytes is None:
        warnings.append(
            ("NoMemoryRequest", "no memory request: the watermark rests on a weaker basis")
        )
    basis: Basis
    if request_bytes is not None:
        basis, basis_bytes = "Request", request_bytes
    elif limit_bytes is not None:
        basis, basis_bytes = "Limit", limit_bytes
    else:
        return WatermarkPlan("Runtime", None, ratio, None, warnings)
    high = math.floor(Decimal(basis_bytes) * ratio)
    return WatermarkPlan(basis, basis_bytes, ratio, high, warnings)


def disk_free_limit(size: int | str) -> int:
    """``max(50 MB, 5 % of the volume)``; ``"0"`` (emptyDir) gives the floor."""
    volume = parse_quantity(size)
    return max(DISK_FREE_FLOOR, math.floor(volume * DISK_FREE_FRACTION))
