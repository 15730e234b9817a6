"""The node's images for the quickstart, built ahead of the plane so the wait has a bar.

Why: on a fresh machine the node tier first debootstraps a base rootfs and then executes
``docker/*.Dockerfile`` (hutch_localkube.images): about two minutes in which the plane's start
would print nothing. Built here first, in the same order and into the same cache the plane
uses, each phase advances a bar by its measured cold time; when everything is cached the
phases take under a second and the plane only imports the images.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from hutch_localkube import images

from hutch_demo import clusters, progress

# Measured cold seconds per phase on 2 cores (docs/real-node.md): the bar's weights.
PHASES: dict[str, float] = {
    "base rootfs": 60,
    "pause": 2,
    "broker": 20,
    "operator": 30,
    "spark": 210,  # Java 17 and pyspark: ~1 GB
}


class ImageBuilds(Protocol):
    """The builds a Builder runs: hutch_localkube.images (a module) or a test's stand-in."""

    def base_rootfs(self) -> object: ...

    def build_pause(self) -> object: ...

    def build_dockerfile_image(self, kind: str) -> object: ...


@dataclass
class Builder:
    """Runs the phases in a thread; the caller polls ``fraction()`` and ``label()``."""

    images: ImageBuilds  # hutch_localkube.images, or a stand-in that records the calls
    done: list[str] = field(default_factory=list)
    current: str | None = None
    since: float = 0.0
    error: BaseException | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    phases: list[str] = field(default_factory=lambda: list(PHASES))

    def run(self) -> None:
        every: dict[str, Callable[[], object]] = {
            "base rootfs": self.images.base_rootfs,
            "pause": self.images.build_pause,
            "broker": lambda: self.images.build_dockerfile_image("broker"),
            "operator": lambda: self.images.build_dockerfile_image("operator"),
            "spark": lambda: self.images.build_dockerfile_image("spark"),
        }
        actions = {name: every[name] for name in self.phases}
        try:
            for name, action in actions.items():
                self.current, self.since = name, time.monotonic()
                action()
                self.seconds[name] = time.monotonic() - self.since
                self.done.append(name)
            self.current = None
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self.error = exc

    def fraction(self, now: float) -> float:
        finished = sum(PHASES[name] for name in self.done)
        if self.current is not None:
            finished += min(now - self.since, 0.95 * PHASES[self.current])
        return finished / sum(PHASES[name] for name in self.phases)

    def label(self) -> str:
        if self.current is None:
            return "images ready"
        return f"{len(self.done) + 1}/{len(self.phases)}: {self.current}"


def build(report: progress.Progress, *, spark: bool = True) -> dict[str, float]:
    """Builds (or finds cached) pause, hutch-broker, hutch-operator and (``spark``) hutch-spark;
    seconds per phase."""
    phases = [name for name in PHASES if spark or name != "spark"]
    builder = Builder(images, phases=phases)
    worker = threading.Thread(target=builder.run, name="image-build", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(timeout=1.0)
        report.update(min(builder.fraction(time.monotonic()), 0.99), builder.label())
    if builder.error is not None:
        report.finish_bar()
        raise clusters.ClusterError(f"image build failed: {builder.error}") from builder.error
    report.update(1.0, builder.label())
    return builder.seconds
