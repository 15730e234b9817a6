"""Progress for the quickstart chain: numbered steps with elapsed times, and a textual bar.

Why: the quickstart runs for about a minute when everything is cached and for about eight when
the Kubernetes binaries must be built first. A user watching a silent terminal for that long
cannot tell a slow step from a hung one, so every step says what it does, how long it took, and
long steps draw a bar. The output is plain text on a stream (stderr by default): on a terminal
the bar redraws in place, elsewhere (CI logs, pytest capture) it prints a line per 10 %.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TextIO

BAR_WIDTH = 30


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``[#########.....]  62%`` for a fraction in [0, 1] (clamped)."""
    fraction = min(1.0, max(0.0, fraction))
    filled = round(fraction * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:3.0f}%"


@dataclass
class StepRecord:
    """One finished (or failed) step, kept for the summary."""

    name: str
    seconds: float
    ok: bool
    label: str = ""  # a short name for one-line timings


@dataclass
class Progress:
    """Prints ``[n/total] step ...`` lines, their outcome and elapsed time, and progress bars."""

    total: int = 0
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    quiet: bool = False
    steps: list[StepRecord] = field(default_factory=list)
    _number: int = 0
    _last_decile: int = -1

    @property
    def interactive(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def say(self, text: str) -> None:
        """A line of its own (detail under the current step)."""
        if not self.quiet:
            self.stream.write(text + "\n")
            self.stream.flush()

    @contextlib.contextmanager
    def step(self, name: str, label: str = "") -> Iterator[None]:
        """Announces a step, then reports ``done in Ns`` or ``FAILED after Ns``."""
        self._number += 1
        self._last_decile = -1
        prefix = f"[{self._number}/{self.total}]" if self.total else f"[{self._number}]"
        self.say(f"{prefix} {name} ...")
        began = time.monotonic()
        try:
            yield
        except BaseException:
            seconds = time.monotonic() - began
            self.steps.append(StepRecord(name, seconds, ok=False, label=label or name))
            self.say(f"      FAILED after {seconds:.1f}s")
            raise
        seconds = time.monotonic() - began
        self.steps.append(StepRecord(name, seconds, ok=True, label=label or name))
        self.say(f"      done in {seconds:.1f}s")

    def update(self, fraction: float, label: str = "") -> None:
        """Redraws the bar (terminal) or prints it at each new 10 % (logs)."""
        if self.quiet:
            return
        line = f"      {bar(fraction)} {label}".rstrip()
        if self.interactive:
            self.stream.write("\r\x1b[2K" + line)
            if fraction >= 1.0:
                self.stream.write("\n")
            self.stream.flush()
            return
        decile = int(min(1.0, max(0.0, fraction)) * 10)
        if decile != self._last_decile:
            self._last_decile = decile
            self.say(line)

    def finish_bar(self) -> None:
        """Ends an in-place bar line that stopped short of 100 % (failure, early exit)."""
        if self.interactive and not self.quiet:
            self.stream.write("\n")
            self.stream.flush()


# Cold-build seconds per phase, in build-binaries.sh's order (its timings.txt, 2 cores,
# 2026-11-27: 523 s in all); the weights of the build bar. A phase in progress advances with its
# elapsed time, capped short of its end. tests/quickstart/test_progress.py checks that every
# phase the script runs is here.
BUILD_PHASES: dict[str, float] = {
    "k8s-modules": 14,
    "kube-apiserver": 226,
    "kube-controller-manager": 51,
    "kube-scheduler": 4,
    "kubelet": 15,
    "kube-proxy": 6,
    "etcd": 27,
    "kwok": 59,
    "helm": 60,
    "coredns-modules": 7,
    "coredns": 53,
    "smoke": 1,
}


@dataclass
class BuildTracker:
    """Turns build-binaries.sh's ``phase <name>: start`` / ``phase=<name> seconds=<n>`` lines
    into a fraction of the whole build."""

    done: set[str] = field(default_factory=set)
    current: str | None = None
    current_since: float = 0.0

    def feed(self, line: str, now: float) -> None:
        text = line.strip()
        if text.startswith("build-binaries: phase ") and text.endswith(": start"):
            self.current = text.removeprefix("build-binaries: phase ").removesuffix(": start")
            self.current_since = now
        elif text.startswith("phase="):
            name = text.split()[0].removeprefix("phase=")
            self.done.add(name)
            if name == self.current:
                self.current = None

    def fraction(self, now: float) -> float:
        total = sum(BUILD_PHASES.values())
        finished = sum(BUILD_PHASES.get(name, 0) for name in self.done)
        if self.current in BUILD_PHASES:
            expected = BUILD_PHASES[self.current]
            finished += min(now - self.current_since, 0.95 * expected)
        return finished / total

    def label(self) -> str:
        if self.current:
            return f"phase {len(self.done) + 1}/{len(BUILD_PHASES)}: building {self.current}"
        return f"phase {len(self.done)}/{len(BUILD_PHASES)} done"
