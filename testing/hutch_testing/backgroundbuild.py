"""The Go builds that scripts/test.sh runs in the background, seen from the shell and from tests.

Why: cold, the Kubernetes binaries and the Spark Operator take about 17 minutes of Go builds
(localkube/gobuild/), and only the node level needs them, so scripts/test.sh
(scripts/background-build.sh) starts them at nice 19 while the fast and the broker levels run,
and waits for them before broker/serial. Two things then need to read the build's state:

- the wait prints a line every ~30 s saying what is being built and for how long, from the
  build's log (``progress_line``; ``python -m hutch_testing.backgroundbuild progress LOG NOW``);
- the broker level's chart tests render with the pinned helm, which the Kubernetes step builds:
  under a background build they wait for that step (``wait_for_k8s_bins``) instead of finding
  no binaries and failing. As a pytest plugin (tests/conftest.py) this module waits before such
  a test's protocol starts, so the wait (about ten minutes cold) is outside its timeout (60 s at
  the broker level): a test needs helm if it uses the ``helm`` fixture or is marked ``helm``.

The build writes to the directory named by ``HUTCH_BACKGROUND_BUILD``: ``build.log`` (each line
prefixed with the seconds since the build started), ``pid`` (its process group), one
``<step>.rc`` per finished step and ``rc`` ("<exit code> <seconds>") when it ends. Without the
variable (pytest run by hand) nothing waits.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hutch_localkube import binaries

ENV = "HUTCH_BACKGROUND_BUILD"
K8S_STEP = "k8s-bins"
_STEP = re.compile(r"background-build: step (\S+): start$")
_PHASE = re.compile(r"build-binaries: phase (\S+): start$")
_LAST_LINE_CHARS = 100


class BackgroundBuildError(RuntimeError):
    """A step of the background build ended with an error, or the build ended without a status."""


@dataclass(frozen=True)
class Progress:
    """Where the build is: its step (and the Kubernetes step's phase), since when, its last line."""

    step: str | None
    phase: str | None
    since: int
    last: str


def parse_log(text: str) -> Progress:
    """The build's position in ``build.log``'s text (pure). Lines are ``<seconds> <text>``; a
    line without the prefix (a partial last line) counts for ``last`` only."""
    step = phase = None
    since = 0
    last = ""
    for raw in text.splitlines():
        stamp, _, line = raw.strip().partition(" ")
        if not stamp.isdigit():
            last = raw.strip() or last
            continue
        last = line.strip() or last
        if match := _STEP.search(line):
            step, phase, since = match[1], None, int(stamp)
        elif (match := _PHASE.search(line)) and step == K8S_STEP:
            phase, since = match[1], int(stamp)
    return Progress(step, phase, since, last)


def progress_line(text: str, now: int) -> str:
    """One line for the wait: what is building and for how long, ``now`` seconds after the
    build started (pure)."""
    progress = parse_log(text)
    if progress.step is None:
        return f"build running {now} s, nothing logged yet"
    what = f"{progress.step} ({progress.phase})" if progress.phase else progress.step
    last = progress.last
    if len(last) > _LAST_LINE_CHARS:
        last = last[: _LAST_LINE_CHARS - 3] + "..."
    return (
        f"building {what} for {max(0, now - progress.since)} s, build running {now} s; "
        f"last line: {last}"
    )


def step_status(build_dir: Path, step: str, alive: Callable[[], bool]) -> int | None:
    """``step``'s exit code once it ended; None while the build still runs. A build that ended
    without writing the step's status is a failure: an earlier step failed, or it was killed."""
    running = alive()  # before reading the files: a build that ends meanwhile wrote them first
    rc = build_dir / f"{step}.rc"
    if rc.is_file():
        return int(rc.read_text().split()[0])
    overall = build_dir / "rc"
    if overall.is_file():
        raise BackgroundBuildError(
            f"the background build ended (exit {overall.read_text().split()[0]}) before its "
            f"{step} step; see {build_dir / 'build.log'}"
        )
    if running:
        return None
    raise BackgroundBuildError(
        f"the background build ended without a status (killed?); see {build_dir / 'build.log'}"
    )


def group_alive(pgid: int) -> bool:
    """Process group ``pgid`` has a member that is not a zombie (an orphan's zombie waits for
    PID 1 to reap it, and ``kill(-pgid, 0)`` counts it)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # the process ended meanwhile
        if fields[0] != "Z" and fields[2] == str(pgid):
            return True
    return False


def _build_alive(build_dir: Path) -> bool:
    """The build whose process group ``build_dir/pid`` names is still running."""
    try:
        return group_alive(int((build_dir / "pid").read_text()))
    except (OSError, ValueError):
        return False


def wait_for_k8s_bins(poll: float = 1.0) -> None:
    """Under a background build (``HUTCH_BACKGROUND_BUILD``), returns once its Kubernetes step
    (build-binaries.sh: the binaries and helm) succeeded; raises BackgroundBuildError if it
    failed. Without one, returns at once."""
    value = os.environ.get(ENV)
    if not value:
        return
    build_dir = Path(value)
    while (status := step_status(build_dir, K8S_STEP, lambda: _build_alive(build_dir))) is None:
        time.sleep(poll)
    if status != 0:
        raise BackgroundBuildError(
            f"the background build's {K8S_STEP} step failed (exit {status}); "
            f"see {build_dir / 'build.log'}"
        )


def bin_dir() -> Path:
    """binaries.find_bin_dir(), once a background build's Kubernetes step is over (the broker
    level's helm users call this: cold, helm is still being built while they run)."""
    wait_for_k8s_bins()
    return binaries.find_bin_dir()


def needs_helm(item: pytest.Item) -> bool:
    """The test runs the pinned helm: it uses the ``helm`` fixture or is marked ``helm``."""
    return (
        "helm" in getattr(item, "fixturenames", ()) or item.get_closest_marker("helm") is not None
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "helm: runs the pinned helm (build-binaries.sh); under a background build the test "
        "waits for it before its timeout starts (hutch_testing.backgroundbuild)",
    )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Before pytest-timeout's timer (a later wrapper) starts: a test that needs helm waits for
    the background build's Kubernetes step. A failed build is left to the test's own lookup
    (bin_dir), which then fails the test with the build's log path."""
    if needs_helm(item):
        with contextlib.suppress(BackgroundBuildError):
            wait_for_k8s_bins()
    return (yield)


def main(argv: list[str]) -> int:
    """``progress LOG NOW``: prints progress_line for the log file at NOW seconds."""
    if len(argv) != 3 or argv[0] != "progress" or not argv[2].isdigit():
        sys.stderr.write("usage: python -m hutch_testing.backgroundbuild progress LOG NOW\n")
        return 2
    try:
        text = Path(argv[1]).read_text(errors="replace")
    except OSError:
        text = ""
    sys.stdout.write(progress_line(text, int(argv[2])) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
