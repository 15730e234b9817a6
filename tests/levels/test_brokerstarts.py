"""hutch_testing.brokerstarts' arithmetic: adding up workers' counts and the report's lines.

Why: the report decides which modules get a shared broker, so a module left out, counted twice
or sorted wrongly would point the work at the wrong place. The counting itself, on real brokers
and real xdist workers, is tests/levels/test_brokerstarts_run.py's.
"""

from __future__ import annotations

from hutch_testing.brokerstarts import ModuleStarts, merge, module_of, rows, total


def test_workers_counts_add_up_per_module():
    counts = merge({}, {"a.py": {"tests": 2, "starts": 2, "restarts": 0}})
    merge(counts, {"a.py": {"tests": 1, "starts": 1, "restarts": 1}, "b.py": {"tests": 3}})
    assert counts == {"a.py": ModuleStarts(3, 3, 1), "b.py": ModuleStarts(3, 0, 0)}
    assert total(counts.values()) == ModuleStarts(6, 3, 1)


def test_the_report_lists_modules_that_launched_most_starts_first_and_a_total():
    counts = {
        "quiet.py": ModuleStarts(tests=5),
        "few.py": ModuleStarts(tests=4, starts=2),
        "many.py": ModuleStarts(tests=10, starts=10),
        "restarts.py": ModuleStarts(tests=1, starts=2, restarts=3),
    }
    lines = rows(counts)
    assert lines[0].split() == ["starts", "restarts", "tests", "per", "test", "module"]
    assert [line.split() for line in lines[1:-1]] == [
        ["10", "0", "10", "1.00", "many.py"],
        ["2", "3", "1", "2.00", "restarts.py"],
        ["2", "0", "4", "0.50", "few.py"],
    ]
    assert lines[-1].split()[:3] == ["14", "3", "20"]
    assert lines[-1].endswith("total, 3 of 4 modules launched a broker")


def test_a_start_outside_any_test_has_no_per_test_figure():
    lines = rows({"(outside a test)": ModuleStarts(starts=1)})
    assert lines[1].split() == ["1", "0", "0", "-", "(outside", "a", "test)"]


def test_a_module_is_the_node_ids_path():
    assert module_of("tests/x/test_y.py::test_z[a::b]") == "tests/x/test_y.py"
    assert module_of("tests/x/test_y.py::TestK::test_z") == "tests/x/test_y.py"
