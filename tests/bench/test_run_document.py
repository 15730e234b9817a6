"""What bench/run.py's results say of ``--baseline``'s tree: its commit, never its path.

Why: results files are kept in docs/bench/ beside the report, and three of them named a
development machine's scratch folder (a git worktree under /tmp) until 2026-11-30.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import run  # noqa: E402

TREE = Path("/scratch/worktrees/base/broker")


def test_the_baseline_is_named_by_its_commit_and_folder_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        run, "_git_commit", lambda tree: "0123456789abcdef" if tree == TREE else None
    )
    assert run._tree_label(TREE) == "a tree of 0123456 (broker/)"
    assert run._tree_label(TREE.parent) == "a tree of no git commit (base/)"
    assert "/scratch" not in run._tree_label(TREE)
