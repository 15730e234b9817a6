"""The watermark body rules (MEM-7) and the stand-in memory monitor."""

import pytest
from hutch_broker.admin import errors, memory


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"relative": 0.4}, {"relative": 0.4}),
        ({"relative": 0}, {"relative": 0.0}),
        ({"relative": 1}, {"relative": 1.0}),
        ({"absolute": 123456789}, {"absolute": 123456789}),
        ({"absolute": "512MiB"}, {"absolute": 512 * 1024 * 1024}),
    ],
)
def test_mem_7_valid_watermarks(body, expected):
    assert memory.parse_watermark(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"relative": 0.4, "absolute": 1},
        {"relative": "0.4"},
        {"relative": 1.5},
        {"relative": -0.1},
        {"relative": True},
        {"absolute": -1},
        {"absolute": "lots"},
        {"absolute": 1.5},
        {"relative": 0.4, "extra": 1},
    ],
)
def test_mem_7_invalid_watermarks(body):
    with pytest.raises(errors.ApiError) as caught:
        memory.parse_watermark(body)
    assert caught.value.status == 400


def test_mem_2_fixed_memory_alarm_and_zero_watermark():
    monitor = memory.FixedMemory(total_memory=1000, mem_used=500)
    assert (monitor.mem_limit, monitor.alarm) == (400, True)
    monitor.set_watermark({"absolute": 600})
    assert (monitor.mem_limit, monitor.alarm) == (600, False)
    monitor.set_watermark({"relative": 0.0})
    assert (monitor.mem_limit, monitor.alarm) == (0, False)
    assert monitor.settings_json() == {"relative": 0.0}
