"""The load generator's and the broker's CPU from /proc (bench/proccpu.py, bench/run.py).

Why: the report puts the load generator's cores beside the broker's to show how much of the
two cores the load took. These pin the pure parts: reading the counters of a /proc/<pid>/stat
line whatever the command name holds, summing a process with or without its reaped children,
and the figures one run records from them. Running a real command is in
test_proccpu_process.py (broker level: it starts processes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import proccpu  # noqa: E402
import run  # noqa: E402

# A real line's shape: pid (comm) state ppid ... utime stime cutime cstime priority ...
_LINE = "4242 ({comm}) S 1 4242 4242 0 -1 4194304 1234 0 0 0 {ut} {st} {cut} {cst} 20 0 9 0 " + (
    "100 200000000 5000 18446744073709551615 1 1 0 0 0 0 0 4096 17415 0 0 0 17 1 0 0 0 0 0"
)


def line(comm: str = "java", ut: int = 1, st: int = 2, cut: int = 3, cst: int = 4) -> str:
    return _LINE.format(comm=comm, ut=ut, st=st, cut=cut, cst=cst)


def test_the_four_counters_are_read_after_the_command_name() -> None:
    stat = proccpu.parse_stat(line(ut=250, st=40, cut=700, cst=9))
    assert stat == proccpu.StatTimes(utime=250, stime=40, cutime=700, cstime=9)
    assert (stat.own(), stat.with_children()) == (290, 999)


@pytest.mark.parametrize("comm", ["python3 loadgen.py", "a) S 1 2 3 (b", "))", ""])
def test_a_command_name_with_spaces_or_parentheses_does_not_shift_the_fields(comm: str) -> None:
    assert proccpu.parse_stat(line(comm=comm, ut=5, st=6, cut=7, cst=8)) == proccpu.StatTimes(
        5, 6, 7, 8
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "not a /proc/<pid>/stat line"),
        ("4242 java S 1 2 3", "not a /proc/<pid>/stat line"),
        ("4242 (java) S 1 4242 4242 0 -1 4194304 1234 0 0 0 1 2", "too short"),
        (line().replace(" 1 2 3 4 20 ", " 1 x 3 4 20 "), "not numbers"),
    ],
)
def test_a_line_that_is_not_a_stat_line_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        proccpu.parse_stat(text)


def test_processes_are_summed_with_or_without_their_reaped_children() -> None:
    broker = [proccpu.StatTimes(100, 50, 7, 3), proccpu.StatTimes(30, 20, 0, 0)]
    assert proccpu.total_seconds(broker, 100, children=False) == pytest.approx(2.0)
    assert proccpu.total_seconds(broker, 100, children=True) == pytest.approx(2.1)
    assert proccpu.total_seconds([], 100, children=True) == 0.0
    with pytest.raises(ValueError, match="positive"):
        proccpu.total_seconds(broker, 0, children=True)


def test_a_run_records_each_sides_cores_and_the_brokers_cost_per_message() -> None:
    figures = run.cpu_figures(
        broker_cpu=10.0, window=20.0, consumed=1_000_000, load_cpu=15.0, load_wall=25.0
    )
    assert figures == {
        "broker_cpu_seconds": 10.0,
        "broker_cores": 0.5,
        "cpu_us_per_message": 10.0,
        "load_cpu_seconds": 15.0,
        "load_cores": 0.6,
        "load_wall_seconds": 25.0,
    }


def test_a_run_without_a_count_or_the_loads_cpu_records_only_what_it_has() -> None:
    figures = run.cpu_figures(
        broker_cpu=3.0, window=0.0, consumed=None, load_cpu=None, load_wall=None
    )
    assert figures == {"broker_cpu_seconds": 3.0}
