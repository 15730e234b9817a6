"""The broker level's serial pass (hutch_testing.serial): which modules it takes, and that the
list stays true to the tree.

Why: scripts/test.sh runs the broker level as ``broker and not serial`` on two workers, then
``broker and serial`` alone, so the rule that marks a test ``serial`` decides both what runs
beside another worker and that nothing falls between the two passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hutch_testing import pytest_plugin, serial

ENTRIES = ("tests/noisy/", "tests/broker/store/test_crash.py")


@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        ("tests/noisy/test_cases.py", True),  # a folder entry takes every module under it
        ("tests/noisy/sub/test_x.py", True),
        ("tests/broker/store/test_crash.py", True),
        ("tests/broker/store/test_crash_child.py", False),  # a module entry is that file only
        ("tests/broker/store/test_crash.pyc", False),
        ("tests/noisyish/test_cases.py", False),  # a folder entry is a whole path segment
        ("other/tests/noisy/test_cases.py", False),
    ],
)
def test_a_module_is_serial_when_an_entry_names_it_or_a_folder_above_it(relpath, expected):
    assert serial.is_serial(relpath, ENTRIES) is expected


def test_every_entry_names_a_module_or_folder_of_the_tree():
    assert serial.missing(serial.REPO) == []
    assert all(
        entry.startswith("tests/") and (entry.endswith(("/", ".py"))) for entry in serial.SERIAL
    )


def test_a_stale_entry_is_reported(tmp_path: Path):
    (tmp_path / "tests" / "noisy").mkdir(parents=True)
    assert serial.missing(tmp_path, ENTRIES) == ["tests/broker/store/test_crash.py"]
    (tmp_path / "tests" / "broker" / "store").mkdir(parents=True)
    (tmp_path / "tests" / "broker" / "store" / "test_crash.py").write_text("")
    assert serial.missing(tmp_path, ENTRIES) == []


class _Item:
    """What the plugin reads of a collected test: its path; what it writes: markers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.markers: list[str] = []

    def add_marker(self, marker: str) -> None:
        self.markers.append(marker)


def test_collection_marks_the_listed_modules_tests_serial_and_no_other():
    listed = _Item(serial.REPO / "tests" / "noisy" / "test_cases.py")
    folder = _Item(serial.REPO / "tests" / "broker" / "fuzz" / "test_frames.py")
    other = _Item(serial.REPO / "tests" / "semantics" / "test_policies.py")
    outside = _Item(Path("/elsewhere/tests/noisy/test_cases.py"))
    pytest_plugin._mark_serial([listed, folder, other, outside])  # type: ignore[list-item]
    assert (listed.markers, folder.markers) == (["serial"], ["serial"])
    assert (other.markers, outside.markers) == ([], [])
