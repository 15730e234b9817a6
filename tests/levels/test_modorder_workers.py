"""hutch_testing.modorder in a real pytest-xdist run: the workers collect the long modules first.

Why: a worker's config is not the controller's (xdist sets the worker's ``dist`` option to
"no"), so the reorder's condition can only be trusted once checked on real workers: a version
that looked for ``--dist loadfile`` there never reordered anything, and the in-memory tests of
tests/levels/test_modorder.py passed all the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker  # starts a pytest with two worker processes

CONFTEST = """
import json, os

def pytest_collection_finish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    with open(f"order-{worker}.json", "w") as out:
        json.dump([item.nodeid for item in session.items], out)
"""


def _tree(root: Path) -> None:
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: long\n    spark: Spark\n")
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_many.py").write_text("def test_1(): pass\ndef test_2(): pass\n")
    (root / "test_one.py").write_text("def test_1(): pass\n")
    (root / "test_spark.py").write_text(
        "import pytest\npytestmark = pytest.mark.spark\ndef test_1(): pass\n"
    )


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A child pytest in ``root``; not a worker itself when this test runs on one."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    return subprocess.run(
        command, check=False, cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_each_worker_collects_the_long_modules_first(tmp_path):
    _tree(tmp_path)
    plugin = ("-p", "hutch_testing.modorder")
    done = _run(tmp_path, *plugin, "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")
    assert done.returncode == 0, done.stdout + done.stderr
    orders = {path.name: json.loads(path.read_text()) for path in tmp_path.glob("order-gw*.json")}
    expected = ["test_spark.py::test_1", "test_many.py::test_1", "test_many.py::test_2"]
    assert orders == {name: [*expected, "test_one.py::test_1"] for name in orders}
    assert set(orders) == {"order-gw0.json", "order-gw1.json"}

    alone = _run(tmp_path, *plugin)  # one process: the order pytest collected
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert json.loads((tmp_path / "order-controller.json").read_text()) == [
        "test_many.py::test_1",
        "test_many.py::test_2",
        "test_one.py::test_1",
        "test_spark.py::test_1",
    ]
