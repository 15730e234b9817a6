"""``pytest --broker-starts`` on real hutch-brokers, in one process and on two xdist workers.

Why: the count is what says which modules to give a shared broker, so it must be checked where
it is taken: a module's broker started by a module-scoped fixture belongs to that module, a
restart is told apart from a start, and under xdist the controller (which hears of every
worker's tests but launches nothing) adds up the workers' counts without counting a test twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker  # starts hutch-brokers and pytest processes

RESTARTS = """
from hutch_testing.brokers import HutchBroker

def test_restart(tmp_path):
    broker = HutchBroker(work_dir=tmp_path / "b").start()
    broker.restart()
    broker.stop(graceful=False)

def test_nothing():
    pass
"""

SHARED = """
import pytest
from hutch_testing.brokers import HutchBroker

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = HutchBroker(work_dir=tmp_path_factory.mktemp("b")).start()
    yield process
    process.stop(graceful=False)

def test_one(broker):
    assert broker.running

def test_two(broker):
    assert broker.running
"""

EXPECTED = {
    "test_restarts.py": {"tests": 2, "starts": 1, "restarts": 1},
    "test_shared.py": {"tests": 2, "starts": 1, "restarts": 0},
    "test_quiet.py": {"tests": 1, "starts": 0, "restarts": 0},
}


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A child pytest in ``root``; not a worker itself when this test runs on one."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    env.pop("HUTCH_PORT_SHARD", None)  # this worker's shard; the child's workers take their own
    return subprocess.run(
        command, check=False, cwd=root, env=env, capture_output=True, text=True, timeout=180
    )


@pytest.mark.parametrize("workers", [(), ("-n", "2", "--dist", "loadfile")], ids=["alone", "xdist"])
def test_starts_are_counted_per_module(tmp_path, workers):
    (tmp_path / "test_restarts.py").write_text(RESTARTS)
    (tmp_path / "test_shared.py").write_text(SHARED)
    (tmp_path / "test_quiet.py").write_text("def test_quiet():\n    pass\n")
    done = _run(tmp_path, "-p", "hutch_testing.brokerstarts", "--broker-starts=out.json", *workers)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == EXPECTED
    report = done.stdout[done.stdout.index("hutch-broker starts per module") :].splitlines()
    assert report[2].split() == ["1", "1", "2", "0.50", "test_restarts.py"]
    assert report[3].split() == ["1", "0", "2", "0.50", "test_shared.py"]
    assert report[4].split()[:3] == ["2", "1", "5"]


def test_without_the_option_nothing_is_reported(tmp_path):
    (tmp_path / "test_quiet.py").write_text("def test_quiet():\n    pass\n")
    done = _run(tmp_path, "-p", "hutch_testing.brokerstarts")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hutch-broker starts" not in done.stdout
