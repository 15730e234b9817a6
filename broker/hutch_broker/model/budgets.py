"""Step budgets: how work that grows with object counts shares the one event loop.

Why this module exists: the broker is one asyncio thread, so any computation that runs to
completion holds every connection of every vhost.  Routing a publish can grow with the
bindings (a topic trie walked with thousands of active nodes, a headers exchange scanned
binding by binding, a fanout to 10,000 queues), and nothing bounded it per loop turn.

Costs are counted in *steps*, each a few hundred nanoseconds of pure Python work: one trie
node examined, one binding compared, one routing key tried on one exchange, one destination
collected.  Two forms of the same computation share a ``Meter``:

- a synchronous attempt charges the meter as it goes and raises ``OverBudgetError`` before
  it would overdraw it (the common, cheap case runs here, at no extra cost);
- a resumable form is a generator that yields the steps it has done every few hundred
  steps; ``Resumable.advance`` runs it while the meter lasts and keeps its place between
  loop turns.

The work an abandoned synchronous attempt did is at most the meter's allowance, paid once.
Nothing here reads a clock: steps are a count, so tests assert them exactly.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Generator
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")

# A resumable computation: yields steps done since its last yield, returns its result.
Steps = Generator[int, None, T]

CHUNK = 256  # steps between two yields of a resumable computation

log = logging.getLogger(__name__)


class OverBudgetError(Exception):
    """A synchronous attempt stopped before overdrawing its meter; run the resumable form."""


class Meter:
    """Steps left in the current allowance; ``charge`` refuses to go below zero."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left

    def charge(self, steps: int) -> None:
        """Take ``steps`` or raise ``OverBudgetError`` (and take nothing)."""
        if steps > self.left:
            raise OverBudgetError
        self.left -= steps


def unlimited() -> Meter:
    """A meter for callers that must finish in one go (and say so where they call it)."""
    return Meter(1 << 62)


class Resumable(Generic[T]):
    """A ``Steps`` generator run slice by slice; ``result`` once ``advance`` returned True."""

    __slots__ = ("_result", "_steps", "done", "taken")

    def __init__(self, steps: Steps[T]) -> None:
        self._steps = steps
        self._result: T | None = None
        self.done = False
        self.taken = 0  # steps run so far, over every slice

    def advance(self, meter: Meter) -> bool:
        """Run until finished or the meter is spent; True when finished.

        A slice can overrun the meter by at most one ``CHUNK`` (a generator yields no later
        than that), so a slice costs at most its allowance plus ``CHUNK`` steps.
        """
        steps = self._steps
        while not self.done and meter.left > 0:
            try:
                done_now = next(steps)
            except StopIteration as finished:
                self._result = finished.value
                self.done = True
                break
            meter.left -= done_now
            self.taken += done_now
        return self.done

    @property
    def result(self) -> T:
        if not self.done:
            raise RuntimeError("the computation has not finished")
        return self._result  # type: ignore[return-value]

    def finish(self) -> T:
        """Run to the end in one go (callers that cannot wait, such as dead-lettering)."""
        self.advance(unlimited())
        return self.result


class Job(Protocol):
    """Deferred work: ``advance`` goes on while the meter lasts; True when finished."""

    def advance(self, meter: Meter) -> bool: ...


class Scheduler:
    """Where the model's deferred work goes: the dispatch layer sets ``meter`` to its loop
    turn's allowance and ``park`` to its queue of parked work (``dispatch.turns``).  Left
    unset (a model on its own, tools, tests), deferred work runs at once."""

    def __init__(self) -> None:
        self.meter = unlimited()
        self.park: Callable[[Job], None] | None = None


class Backlog:
    """Jobs of one vhost that did not fit in the turn (dead letters), run in order."""

    def __init__(self, scheduler: Scheduler | None = None) -> None:
        self.scheduler = scheduler or Scheduler()
        self.jobs: collections.deque[Job] = collections.deque()

    @property
    def meter(self) -> Meter:
        """The allowance an inline attempt may spend now."""
        return self.scheduler.meter

    def defer(self, job: Job) -> None:
        """Run ``job`` after the jobs before it, over later turns (at once if unscheduled)."""
        park = self.scheduler.park
        if park is None:
            while not job.advance(unlimited()):
                pass
            return
        self.jobs.append(job)
        if len(self.jobs) == 1:
            park(self)

    def advance(self, meter: Meter) -> bool:
        """``Job``: run the jobs in order while ``meter`` lasts; True once none is left."""
        jobs = self.jobs
        while jobs:
            try:
                if not jobs[0].advance(meter):
                    return False
            except Exception:  # one broken job must not stop the vhost's others
                log.exception("deferred work failed and was dropped")
            jobs.popleft()
        return True
