"""Process supervision for plane runs: PID records, stopping by PID, stale runs, probes, logs.

Why: a plane's processes must never outlive the run that started them, even when its owner is
killed (SIGKILL, OOM, a cancelled CI job), and must be stopped by their own PID only, never by
name, since other checkouts on the machine run the same binaries. Every run writes
``$RUN/pids`` (``owner`` first, then each component) before anything starts; ``down`` and the
stale-run reaper read that file back. Design: docs/control-plane.md ("Stale runs").
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from hutch_localkube import binaries, realnode

log = logging.getLogger("hutch.k8s")

GRACE_SECONDS = 10.0
POLL_SECONDS = 0.1


def free_ports(count: int) -> list[int]:
    """Binds port 0 on loopback for all ports at once so they are distinct, then frees them."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def self_exe() -> str:
    """The owner's binary as /proc sees it, for the stale-run PID-reuse guard."""
    return os.readlink("/proc/self/exe")


def process_matches(pid: int, exe: str) -> bool:
    """True only if ``pid`` is alive and still runs ``exe``: guards against PID reuse."""
    try:
        actual = os.readlink(f"/proc/{pid}/exe")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and actual.removesuffix(" (deleted)") == exe


def stop_pid(pid: int, exe: str, grace: float = GRACE_SECONDS) -> None:
    """Stops a process we did not spawn (stale run, ``down``): SIGTERM, grace, SIGKILL."""
    if not process_matches(pid, exe):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while process_matches(pid, exe) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    if process_matches(pid, exe):
        os.kill(pid, signal.SIGKILL)


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """Stops one of our children by its PID: SIGTERM, 10 s grace, SIGKILL, reap."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


@dataclass(frozen=True)
class PidRecord:
    """One line of ``$RUN/pids``: role (``owner`` or a component), PID and its binary."""

    role: str
    pid: int
    exe: str


def read_pids(run_dir: Path) -> list[PidRecord]:
    """Parses ``$RUN/pids``; a missing file means nothing is left to stop."""
    try:
        lines = (run_dir / "pids").read_text().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        record = parse_pid_line(line)
        if record is None:
            log.warning("%s/pids: ignoring a line that is not 'ROLE PID EXE': %r", run_dir, line)
        else:
            records.append(record)
    return records


def parse_pid_line(line: str) -> PidRecord | None:
    """``ROLE PID EXE``: the PID is the first field of digits alone, so a role written with a
    space in it (``spark-submit (stream job)``, as the demo chain once wrote) and an executable's
    path with spaces both parse. None for a line with no PID or no executable.

    Why this matters: every plane start reaps the runs whose owner died by reading their pids
    files, so one line that failed to parse made every later node test fail at its set-up, and
    a kept run's Ctrl-C hang until it was killed.
    """
    fields = line.split(" ")
    at = next((i for i, field in enumerate(fields) if i and field.isdigit()), None)
    if at is None or at + 1 >= len(fields):
        return None
    return PidRecord(" ".join(fields[:at]), int(fields[at]), " ".join(fields[at + 1 :]))


def remove_run(run_dir: Path) -> None:
    """Deletes a run's etcd data (on /dev/shm) and its run directory.

    Never while something is mounted under it: rmtree would follow a bind mount (a node's
    volume) into the files behind it.
    """
    mounted = realnode.mounts_under(run_dir)
    if mounted:
        log.error("not removing %s: still mounted: %s", run_dir, ", ".join(mounted))
        return
    shm_file = run_dir / "shm-dir"
    if shm_file.is_file():
        shutil.rmtree(shm_file.read_text().strip(), ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)


def stop_recorded(run_dir: Path) -> None:
    """Stops exactly the recorded component PIDs, newest first, then forgets them."""
    for record in reversed(read_pids(run_dir)):
        if record.role != "owner":
            stop_pid(record.pid, record.exe)
    with contextlib.suppress(FileNotFoundError):
        (run_dir / "pids").unlink()


def owner_alive(run_dir: Path) -> PidRecord | None:
    """The run's owning process (pytest or the CLI's ``up``), if it is still alive."""
    for record in read_pids(run_dir):
        if record.role == "owner" and process_matches(record.pid, record.exe):
            return record
    return None


def reap_stale_runs() -> None:
    """Stops leftovers of runs whose owner died (SIGKILL, OOM).

    docs/contracts/local-kubernetes.md#process-hygiene (stale runs)
    """
    for run_dir in Path(tempfile.gettempdir()).glob("hutch-k8s-*"):
        if (run_dir / "pids").is_file() and owner_alive(run_dir) is None:
            log.warning("reaping stale k8s run %s", run_dir)
            stop_recorded(run_dir)
            realnode.cleanup(run_dir)  # a node's containers, mounts, cgroups, bridge, rule
            if not binaries.env_flag("HUTCH_K8S_KEEP"):
                remove_run(run_dir)


# --- HTTP probes -------------------------------------------------------------------------------


def http_get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """One GET with a short timeout; connection errors read as status 0 (not up yet)."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:  # noqa: S310 - http(s) to loopback only
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()
    except (OSError, ValueError):
        return 0, b""


def log_tails(log_dir: Path, lines: int = 50) -> str:
    """The last lines of every component log, for start failures and timeouts."""
    parts = []
    for path in sorted(log_dir.glob("*.log")):
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"----- {path.name} (last {len(tail)} lines) -----\n" + "\n".join(tail))
    return "\n".join(parts)
