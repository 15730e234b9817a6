"""The lifecycle every broker launcher shares: start a child, wait until it answers, stop just it.

Why: tests and bench/ run the reference RabbitMQ node and hutch-broker side by side, start them once
per session or once per test, crash and restart them. Doing that reliably needs the same care for
both: a private process group per broker (so `stop()` signals only what we started, never a shared
epmd or another session's node), readiness measured by the protocols themselves, the log tail in
every start-up error, and peak memory read from /proc for the benchmark's RSS column.

`BrokerProcess` holds that lifecycle; `rabbitmq.RabbitMQ` and `brokers.HutchBroker` only say which
command to run, with which environment and files.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TypedDict

from hutch_demo import ports, probes

log = logging.getLogger(__name__)

_LOG_TAIL_BYTES = 16 * 1024
_POLL_INTERVAL = 0.05
_RUNNING: weakref.WeakSet[BrokerProcess] = weakref.WeakSet()


class BrokerStartError(RuntimeError):
    """A broker did not become ready; the message carries the tail of its logs."""


class Addressed:
    """The URLs and credentials of a broker on ``host`` (a process, or the chain's Endpoint)."""

    host: str
    amqp_port: int
    http_port: int
    username: str
    password: str

    @property
    def amqp_url(self) -> str:
        return f"amqp://{self.username}:{self.password}@{self.host}:{self.amqp_port}/%2F"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def credentials(self) -> tuple[str, str]:
        return self.username, self.password


class LaunchOptions(TypedDict, total=False):
    """``BrokerProcess``'s keyword arguments but ``work_dir``, which a fixture may choose."""

    username: str
    password: str
    start_timeout: float
    stop_timeout: float


class ProcessOptions(LaunchOptions, total=False):
    """All of ``BrokerProcess``'s keyword arguments: subclasses pass them through unchanged."""

    work_dir: Path | None


class BrokerProcess(Addressed):
    """A broker child process on loopback with AMQP and management HTTP listeners.

    Subclasses provide `_command()`, `_environment()`, `_prepare()` and `_log_files()`.
    """

    kind = "broker"
    #: SIGTERM and wait on stop() even when the files are thrown away afterwards.
    graceful_stop = True

    def __init__(
        self,
        *,
        username: str = "guest",
        password: str = "guest",  # noqa: S107 - the brokers' loopback-only default user
        start_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        work_dir: Path | None = None,
    ) -> None:
        self.host = ports.LOOPBACK
        self.username = username
        self.password = password
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.amqp_port, self.http_port = ports.free_ports(2)
        self._owns_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix=f"hutch-test-{self.kind}-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.console_log = self.work_dir / "console.log"
        self.started_in: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._console: IO[bytes] | None = None

    # -- what subclasses provide -------------------------------------------------------------

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _environment(self) -> dict[str, str]:
        return dict(os.environ)

    def _prepare(self) -> None:
        """Write config files and create directories before each launch."""

    def _log_files(self) -> list[Path]:
        return [self.console_log]

    # -- public surface --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        """Launch the broker and block until AMQP and `GET /api/overview` answer."""
        if self.running:
            return self
        began = time.monotonic()
        self._prepare()
        self._launch()
        _RUNNING.add(self)
        self._wait_ready(deadline=began + self.start_timeout)
        self.started_in = time.monotonic() - began
        log.info(
            "%s ready on %s and %s in %.1fs",
            self.kind,
            self.amqp_url,
            self.http_url,
            self.started_in,
        )
        return self

    def stop(self, *, keep_files: bool = False, graceful: bool | None = None) -> int | None:
        """SIGTERM the broker, SIGKILL what is left after `stop_timeout`, remove our files.

        `graceful=False` skips SIGTERM. Returns the exit code of the launched process (None if it
        was never started).
        """
        if graceful is None:
            graceful = keep_files or self.graceful_stop
        code = self._terminate(graceful=graceful)
        _RUNNING.discard(self)
        if not keep_files and self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        return code

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        """Send `sig` to every process of the broker, as a crash would.

        For SIGKILL, SIGTERM and SIGINT, wait (bounded) for the broker to exit and return its code;
        for other signals (SIGSTOP, SIGCONT, ...) return None at once.
        """
        self._signal_group(sig)
        if sig not in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT) or self._process is None:
            return None
        try:
            return self._process.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            return None

    def restart(self) -> Self:
        """Stop (or reap a killed) broker and start it again on the same ports and data."""
        self._terminate()
        return self.start()

    def overview(self) -> dict[str, Any] | None:
        return probes.overview(
            self.host, self.http_port, username=self.username, password=self.password
        )

    def group_pids(self) -> list[int]:
        """Every live process the broker consists of: the launched one and all its descendants.

        Descendants, not the process group: Erlang's erl_child_setup calls setsid(). epmd, which
        daemonizes away from its parent, is shared by all nodes and is not ours.
        """
        if self._process is None:
            return []
        return sorted(pid for pid, _ in _process_tree(self._process.pid))

    def cpu_seconds(self) -> float:
        """User plus system CPU time the broker's live processes have used, from /proc/<pid>/stat.

        Why: on a shared machine the wall clock of a request moves with the neighbours' load,
        the CPU the broker spent on it does not, so a test that compares two ways of doing the
        same work compares this.
        """
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.group_pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited since it was listed
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        return total / ticks

    def peak_rss_bytes(self) -> int:
        """Sum of VmHWM (peak resident set) over the broker's processes, from /proc/<pid>/status."""
        return sum(_status_kib(pid, "VmHWM") for pid in self.group_pids()) * 1024

    def rss_bytes(self) -> int:
        """Sum of VmRSS (current resident set) over the broker's processes."""
        return sum(_status_kib(pid, "VmRSS") for pid in self.group_pids()) * 1024

    def reset_peak_rss(self) -> bool:
        """Reset VmHWM to the current RSS (Linux clear_refs 5), to measure the peak of one run."""
        done = True
        for pid in self.group_pids():
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")
            except OSError:
                done = False
        return done

    def log_tail(self, max_bytes: int = _LOG_TAIL_BYTES) -> str:
        parts = [_tail(path, max_bytes) for path in self._log_files()]
        return "\n".join(part for part in parts if part)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<{type(self).__name__} amqp={self.amqp_port} http={self.http_port} {state}>"

    # -- lifecycle internals ---------------------------------------------------------------------

    def _launch(self) -> None:
        command = self._command()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._console = self.console_log.open("ab")
        self._process = subprocess.Popen(  # noqa: S603 - the launcher's own fixed command
            command,
            env=self._environment(),
            cwd=self.work_dir,
            stdin=subprocess.DEVNULL,
            stdout=self._console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() signals exactly what we started
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - a tiny prctl, no locks taken
        )

    def _wait_ready(self, *, deadline: float) -> None:
        process = self._process
        if process is None:
            raise BrokerStartError(f"{self.kind} was not launched")
        while time.monotonic() < deadline:
            code = process.poll()
            if code is not None:
                self._fail(f"exited with code {code} during start-up")
            if self._answers():
                return
            time.sleep(_POLL_INTERVAL)
        self._fail(f"did not answer AMQP and GET /api/overview within {self.start_timeout:.0f}s")

    def _answers(self) -> bool:
        return probes.amqp_answers(self.host, self.amqp_port) and self.overview() is not None

    def _fail(self, reason: str) -> None:
        self._terminate(graceful=False)
        _RUNNING.discard(self)
        tail = self.log_tail()
        raise BrokerStartError(
            f"{self.kind} {reason} (amqp {self.amqp_port}, http {self.http_port}, "
            f"work dir {self.work_dir})\n--- log tail ---\n{tail}"
        )

    def _terminate(self, *, graceful: bool = True) -> int | None:
        process = self._process
        if process is None:
            return None
        tree = _process_tree(process.pid)  # before signals: children get re-parented on exit
        if graceful and process.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs; SIGKILL", self.kind, self.stop_timeout)
        # Kill whatever is left of the tree, e.g. RabbitMQ's beam under its sh wrapper.
        self._signal_group(signal.SIGKILL)
        _kill_exactly(tree | _process_tree(process.pid))
        code = process.wait(timeout=self.stop_timeout)
        self._wait_gone(tree)
        if self._console is not None:
            self._console.close()
            self._console = None
        return code

    def _signal_group(self, sig: int) -> None:
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, sig)

    def _wait_gone(self, tree: set[tuple[int, int]]) -> None:
        deadline = time.monotonic() + self.stop_timeout
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(_POLL_INTERVAL)


def _read_stat(pid: str) -> tuple[int, int, int] | None:
    """(ppid, pgrp, start time) of a live, non-zombie process, or None."""
    try:
        stat = Path("/proc", pid, "stat").read_text()
    except OSError:
        return None
    # The fields after the command name (which may hold spaces and parentheses), from `state`.
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _process_table() -> dict[int, tuple[int, int, int]]:
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (stat := _read_stat(entry.name)) is not None:
            table[int(entry.name)] = stat
    return table


def _process_tree(root: int) -> set[tuple[int, int]]:
    """(pid, start time) of `root`, its descendants and its process group's members."""
    table = _process_table()
    found = {pid for pid, (_, pgrp, _) in table.items() if pgrp == root}
    if root in table:
        found.add(root)
    frontier = list(found)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _, _) in table.items() if ppid == parent]
        frontier.extend(child for child in children if child not in found)
        found.update(children)
    return {(pid, table[pid][2]) for pid in found}


def _alive(tree: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The members of `tree` still running: same pid and same start time (no reused pid)."""
    alive = set()
    for pid, started in tree:
        stat = _read_stat(str(pid))
        if stat is not None and stat[2] == started:
            alive.add((pid, started))
    return alive


def _kill_exactly(tree: set[tuple[int, int]]) -> None:
    for pid, _ in _alive(tree):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _status_kib(pid: int, field: str) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _tail(path: Path, max_bytes: int) -> str:
    """The file's end; for a long file also its first quarter-budget, where a crash loop began."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size <= max_bytes:
                handle.seek(0)
                data = handle.read()
            else:
                handle.seek(0)
                head = handle.read(max_bytes // 4)
                handle.seek(size - (max_bytes - len(head)))
                data = head + b"\n[...]\n" + handle.read()
    except OSError:
        return ""
    return f"[{path.name}]\n{data.decode('utf-8', errors='replace')}"


@atexit.register
def _stop_leftovers() -> None:
    """Never leave a broker running when the interpreter exits (an interrupted test session)."""
    for broker in list(_RUNNING):
        with contextlib.suppress(Exception):
            broker.stop()


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it if the test process dies first (Linux).

    A pytest run killed by a timeout or SIGKILL runs no fixture teardown; without this its
    brokers would outlive it and keep ports, memory and CPU.
    """
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
