"""The watermark and disk-limit tables of docs/contracts/operator.md#memory-plan, no cluster."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hutch_operator.instances import memory

MiB, GiB = 1024**2, 1024**3


@pytest.mark.parametrize(
    ("request_", "limit", "relative", "basis", "expected"),
    [
        ("512Mi", "512Mi", 0.4, "Request", 214_748_364),
        ("2Gi", "2Gi", 0.4, "Request", 858_993_459),
        ("4Gi", "4Gi", 0.4, "Request", 1_717_986_918),
        ("1G", "1G", 0.5, "Request", 500_000_000),
        (None, "1Gi", 0.4, "Limit", 429_496_729),
        ("256Mi", "1Gi", 0.4, "Request", 107_374_182),
    ],
)
def test_watermark_basis_and_bytes(request_, limit, relative, basis, expected) -> None:
    resources = {"requests": {}, "limits": {}}
    if request_:
        resources["requests"]["memory"] = request_
    if limit:
        resources["limits"]["memory"] = limit
    plan = memory.watermark(resources, relative)
    assert (plan.basis, plan.high_watermark_bytes) == (basis, expected)
    assert plan.config_line() == f"vm_memory_high_watermark.absolute = {expected}"
    assert plan.status()["relative"] == str(relative)


def test_runtime_basis_writes_relative() -> None:
    plan = memory.watermark({"requests": {"cpu": "1"}}, 0.4)
    assert plan.basis == "Runtime"
    assert plan.high_watermark_bytes is None
    assert plan.config_line() == "vm_memory_high_watermark.relative = 0.4"
    assert plan.status() == {"basis": "Runtime", "relative": "0.4"}
    assert [reason for reason, _ in plan.warnings] == ["NoMemoryRequest"]


@pytest.mark.parametrize(
    ("resources", "relative", "reasons"),
    [
        ({"requests": {"memory": "512Mi"}, "limits": {"memory": "512Mi"}}, 0.4, []),
        ({"requests": {"memory": "512Mi"}, "limits": {"memory": "1Gi"}}, 0.4,
         ["MemoryRequestAndLimitDifferent"]),
        ({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}, 0.6, ["WatermarkAboveHalf"]),
        ({"limits": {"memory": "1Gi"}}, 0.7, ["WatermarkAboveHalf", "NoMemoryRequest"]),
        ({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}, 0.5, []),
    ],
)  # fmt: skip
def test_warnings(resources, relative, reasons) -> None:
    assert [r for r, _ in memory.watermark(resources, relative).warnings] == reasons


@pytest.mark.parametrize(
    ("size", "expected"),
    [("1Gi", 53_687_091), ("10Gi", 536_870_912), ("0", 50_000_000), ("100Mi", 50_000_000)],
)
def test_disk_free_limit(size, expected) -> None:
    assert memory.disk_free_limit(size) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [("512Mi", 512 * MiB), ("2Gi", 2 * GiB), ("1G", 10**9), ("250m", Decimal("0.25")),
     ("1e3", 1000), ("1.5Gi", int(1.5 * GiB)), (123, 123), ("7k", 7000)],
)  # fmt: skip
def test_parse_quantity(text, value) -> None:
    assert memory.parse_quantity(text) == value


def test_bad_quantity() -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        memory.parse_quantity("12 apples")
