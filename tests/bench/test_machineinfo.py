"""bench/machineinfo.py: the CPU's name from /proc/cpuinfo and the Python speed figure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import machineinfo  # noqa: E402

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
cpu MHz\t\t: 1996.249

processor\t: 1
model name\t: AMD EPYC
"""


def test_the_first_model_name_is_the_cpu() -> None:
    assert machineinfo.cpu_model(CPUINFO) == "AMD EPYC"
    assert machineinfo.cpu_model("model name\t: Intel(R) Xeon(R) Processor\n") == (
        "Intel(R) Xeon(R) Processor"
    )


def test_a_cpuinfo_without_a_model_name_gives_none() -> None:
    assert machineinfo.cpu_model("processor\t: 0\nvendor_id\t: ARM\n") is None
    assert machineinfo.cpu_model("model name\t:\n") is None
    assert machineinfo.this_cpu_model(Path("/nonexistent/cpuinfo")) is None


def test_the_loop_figure_is_a_positive_time_that_grows_with_the_work() -> None:
    small = machineinfo.python_loop_ms(iterations=20_000, repeats=3)
    large = machineinfo.python_loop_ms(iterations=400_000, repeats=1)
    assert 0 < small < large


@pytest.mark.broker  # it starts processes
def test_the_parallel_figure_compares_processes_at_once_with_one_alone() -> None:
    # One process "at once" is the loop alone again: about 1, whatever the machine (wide
    # bounds: the test's neighbours move both timings).
    assert 0.3 < machineinfo.parallel_slowdown(iterations=200_000, workers=1) < 3
    assert machineinfo.parallel_slowdown(iterations=200_000, workers=2) > 0.3
    assert set(machineinfo.facts()) == {"cpu_model", "python_loop_ms", "parallel_slowdown"}
