"""Test levels (hutch_testing.levels): each test's level follows from its markers and fixtures,
and the fast level's guard fails a test that starts a process or opens a socket.

Why: ``make fast`` is only worth running if nothing slow can hide in it, and nobody has to
remember a marker: the plugin derives the level, the guard checks it, and its failure says how to
place the test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hutch_testing import levels


@pytest.mark.parametrize(
    ("markers", "declared", "level"),
    [
        ((), (), "fast"),
        (("parametrize", "asyncio"), (None, None), "fast"),
        ((), (None, "broker"), "broker"),
        (("rabbitmq",), (), "broker"),
        (("spark",), (), "broker"),
        (("slow",), (), "broker"),
        (("broker",), (), "broker"),
        (("k8s",), ("broker",), "node"),
        (("node",), (), "node"),
        ((), ("node",), "node"),
        (("e2e", "k8s"), (), "e2e"),
    ],
)
def test_the_level_follows_from_markers_and_the_fixtures_declarations(markers, declared, level):
    assert levels.level_of(markers, declared) == level


def test_a_fixture_declares_its_level_through_wrappers():
    def fixture() -> None: ...

    def wrapper() -> None: ...

    wrapper.__wrapped__ = levels.broker_level(fixture)  # type: ignore[attr-defined]
    assert levels.declared_level(fixture) == "broker"
    assert levels.declared_level(wrapper) == "broker"
    assert levels.declared_level(lambda: None) is None


def _network_socket() -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


def test_the_guard_blocks_connections_binds_and_process_starts_and_remembers_each():
    guard = levels.Guard()
    with guard.active(), _network_socket() as sock:
        with pytest.raises(levels.LevelError, match=r"opened a connection to 127\.0\.0\.1:9"):
            sock.connect(("127.0.0.1", 9))
        with pytest.raises(levels.LevelError):
            sock.connect_ex(("127.0.0.1", 9))
        with pytest.raises(levels.LevelError, match=r"bound a socket to 127\.0\.0\.1:0"):
            sock.bind(("127.0.0.1", 0))
        with pytest.raises(levels.LevelError, match="started a process: true --version"):
            subprocess.run(["true", "--version"], check=False)
        with pytest.raises(levels.LevelError, match=r"started a process \(os.fork\)"):
            os.fork()
    assert guard.attempts == [
        "opened a connection to 127.0.0.1:9",
        "opened a connection to 127.0.0.1:9",
        "bound a socket to 127.0.0.1:0",
        "started a process: true --version",
        "started a process (os.fork)",
    ]


def test_the_guard_lets_unix_socket_pairs_through_and_restores_every_attribute():
    before = {name: vars(socket.socket).get(name) for name in ("connect", "connect_ex", "bind")}
    popen, fork = subprocess.Popen.__init__, os.fork
    guard = levels.Guard()
    with guard.active():
        left, right = socket.socketpair()  # an event loop's self-pipe is one
        with left, right:
            left.sendall(b"x")
            assert right.recv(1) == b"x"
    assert guard.attempts == []
    after = {name: vars(socket.socket).get(name) for name in ("connect", "connect_ex", "bind")}
    assert after == before
    assert (subprocess.Popen.__init__, os.fork) == (popen, fork)


PROBE = """
import socket
import subprocess

import pytest
from hutch_testing import levels


@pytest.fixture
@levels.broker_level
def starts_something():
    return "started"


def test_pure():
    assert 1 + 1 == 2


def test_connects_and_swallows_the_error():
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    except Exception:
        pass


def test_starts_a_process():
    subprocess.run(["true"], check=True)


def test_with_a_broker_level_fixture(starts_something):
    subprocess.run(["true"], check=True)
"""


def _run_probe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(PROBE))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "hutch_testing.pytest_plugin", "-p", "no:cacheprovider",
         "-q", "-rf", "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py"), *args],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.broker  # it runs pytest in a child process
def test_the_plugin_marks_levels_and_fails_fast_tests_that_leave_memory(tmp_path):
    everything = _run_probe(tmp_path)
    output = everything.stdout
    assert "2 failed, 2 passed" in output, output
    assert (
        "test_probe.py::test_connects_and_swallows_the_error is at level fast, but in its call "
        "it opened a connection to 127.0.0.1:9. A test that starts a process or opens a socket "
        "is at level broker"
    ) in output
    assert "test_starts_a_process is at level fast, but in its call it started a process: true" in (
        output
    )

    fast = _run_probe(tmp_path, "-m", "fast", "--deselect", "test_probe.py::test_starts_a_process",
                      "--deselect", "test_probe.py::test_connects_and_swallows_the_error")  # fmt: skip
    assert "1 passed, 3 deselected" in fast.stdout, fast.stdout
    broker = _run_probe(tmp_path, "-m", "broker")
    assert "1 passed, 3 deselected" in broker.stdout, broker.stdout


@pytest.mark.broker  # it runs pytest in a child process
def test_a_mark_below_the_level_the_fixtures_give_stops_the_collection(tmp_path):
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n\n@pytest.mark.k8s\n@pytest.mark.broker\ndef test_x():\n    pass\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "hutch_testing.pytest_plugin", "-p", "no:cacheprovider",
         "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_marked.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert (
        "test_marked.py::test_x is marked broker but its fixtures put it at level node: drop the "
        "mark (a test is at one level, docs/testing.md#test-levels)"
    ) in run.stderr
