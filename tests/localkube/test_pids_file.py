"""A run's ``pids`` file parses whatever a writer put in it (hutch_localkube.supervision).

Why: every plane start reaps the runs whose owner died, reading their ``pids`` files. The demo
chain wrote a role with spaces in it (``chain-spark-submit (stream job)``), the reader split on
the first two spaces and raised, and in a fresh-clone CI run the kept ``make run`` hung at its
Ctrl-C and every later node test failed at its set-up. Pure: files under ``tmp_path`` only.
"""

from __future__ import annotations

import os
from pathlib import Path

from hutch_demo import launchers
from hutch_localkube import supervision


def test_a_role_with_spaces_and_an_executable_path_with_spaces_both_parse(tmp_path: Path) -> None:
    (tmp_path / "pids").write_text(
        "owner 14421 /usr/bin/python3.11\n"
        "chain-spark-submit (stream job) 17972 /usr/bin/env\n"
        "kubelet 16462 /opt/my bins/kubelet\n"
    )
    assert supervision.read_pids(tmp_path) == [
        supervision.PidRecord("owner", 14421, "/usr/bin/python3.11"),
        supervision.PidRecord("chain-spark-submit (stream job)", 17972, "/usr/bin/env"),
        supervision.PidRecord("kubelet", 16462, "/opt/my bins/kubelet"),
    ]


def test_a_line_without_a_pid_is_skipped_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "pids").write_text("owner 1 /bin/sh\ngarbage\nrole-only 42\n")
    assert supervision.read_pids(tmp_path) == [supervision.PidRecord("owner", 1, "/bin/sh")]


def test_the_demo_writes_a_role_without_spaces(tmp_path: Path) -> None:
    (tmp_path / "pids").write_text("owner 1 /bin/sh\n")
    launchers.record_pid(tmp_path, "chain-spark-submit (stream job)", os.getpid())
    last = (tmp_path / "pids").read_text().splitlines()[-1]
    assert last.split(" ")[:2] == ["chain-spark-submit-(stream-job)", str(os.getpid())]
    assert supervision.read_pids(tmp_path)[-1].pid == os.getpid()
