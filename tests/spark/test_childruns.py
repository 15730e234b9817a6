"""childruns.wait_progressing: a child run fails on a stall or an exit, never on a total time.

Why: the driver-kill tests rest on it (a run is stuck when its log and files stop changing for
``STALL_S``, a ``hutch_testing.progress.Watch``), and a real stall there costs two minutes and a
JVM. Here a stand-in child and files in a temporary directory show the three outcomes, with the
window shortened.
"""

from pathlib import Path
from typing import Any

import pytest

from tests.spark import childruns

DIRS = ("checkpoint", "out")


class Child:
    """A stand-in for the run's Popen: ``poll`` returns ``code``, None while it runs."""

    def __init__(self, code: int | None = None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(childruns, "STALL_S", 1.0)
    for name in DIRS:
        (tmp_path / name).mkdir()
    (tmp_path / "run1.log").write_text("starting\n")
    return tmp_path


def test_a_run_that_keeps_writing_is_waited_for_past_the_window(work: Path) -> None:
    steps = [0]

    def reached() -> bool:  # a new batch file every poll, 8 polls (1.6 s) in all
        steps[0] += 1
        (work / "out" / f"batch-{steps[0]}").touch()
        return steps[0] >= 8

    child: Any = Child()
    childruns.wait_progressing(child, work, 1, "batch 8", reached, DIRS)
    assert steps[0] == 8


def test_a_run_that_shows_no_progress_fails_naming_what_stalled_and_its_log(work: Path) -> None:
    (work / "checkpoint" / "offsets").mkdir()
    child: Any = Child()
    with pytest.raises(AssertionError) as caught:
        childruns.wait_progressing(child, work, 1, "batch 3", lambda: False, DIRS)
    assert str(caught.value) == (
        "run 1, waiting for batch 3: stalled, no progress for 1 s (log size and files under "
        "checkpoint, out: last seen (9, 1, 0)):\nstarting\n"
    )


def test_a_run_that_exits_before_fails_at_once_with_its_log(work: Path) -> None:
    child: Any = Child(code=1)
    with pytest.raises(pytest.fail.Exception, match=r"^run 1 exited before its end:\nstarting\n$"):
        childruns.wait_progressing(child, work, 1, "its end", lambda: False, DIRS)
