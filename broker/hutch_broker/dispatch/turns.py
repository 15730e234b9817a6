"""Work that did not fit in one event-loop turn goes on in later turns, a slice each.

Why this module exists: a publish whose routing is expensive (``model.budgets``) must not
hold the loop, and must not let its connection run ahead either: the connection stops
reading and processing frames until the publish is routed, so publish order, confirms
and returns stay exactly as if it had been routed at once.  This module holds those
parked jobs and the step allowance of the current turn.

- ``meter`` is what the publishes processed during a turn may spend inline.  Whatever
  the turn, a publish may spend at least ``FLOOR`` steps, so cheap routes (direct, small
  fanouts, cached topic keys) never park: the common path pays nothing.
- ``end_of_turn`` (the server calls it once per loop turn, with the flush) refills the
  allowance and advances the parked jobs round-robin until it is spent, then refills it
  again for the next turn's inline work.  A turn thus spends at most two allowances plus
  ``FLOOR`` per connection on routing, however many connections wait or how big their
  routes are: the attacker's connections slow down, nobody else does.
- Dead letters are routed against the same allowance; a vhost's dead letters that do not
  fit wait in its backlog (``model.deadletter``), which takes its turn like a parked
  publish.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Final, Protocol

from hutch_broker.model import budgets

# About 0.7 ms of routing in a process of its own (a step is one trie node or binding
# examined); 1.5-1.9 ms of CPU measured in the broker on a loaded, shared 2-core machine.
TURN_STEPS: Final = 5_000
FLOOR: Final = 64  # steps any publish may spend inline, even when the turn's are gone

log = logging.getLogger(__name__)


class Parked(Protocol):
    """A job waiting for later turns: a parked publish (``dispatch.publishing``) or a
    vhost's backlog of dead letters (``model.budgets.Backlog``)."""

    def advance(self, meter: budgets.Meter) -> bool:
        """Work while ``meter`` lasts; True when finished (or abandoned)."""


class Turns:
    def __init__(
        self,
        request_turn: Callable[[], None],
        *,
        turn_steps: int = TURN_STEPS,
        scheduler: budgets.Scheduler | None = None,
    ) -> None:
        self.turn_steps = turn_steps
        self.meter = budgets.Meter(turn_steps)
        self.parked: collections.deque[Parked] = collections.deque()
        self.slices = 0  # slices run for parked jobs since start (for tests and metrics)
        self._request_turn = request_turn
        if scheduler is not None:  # the model's deferred work (dead letters) comes here too
            scheduler.meter = self.meter
            scheduler.park = self.park

    def inline_meter(self) -> budgets.Meter:
        """The meter a publish routes against now: the turn's, topped up to ``FLOOR``
        (``publishing.publish``, the hot path, does the same inline)."""
        meter = self.meter
        meter.left = max(meter.left, FLOOR)
        return meter

    def park(self, job: Parked) -> None:
        self.parked.append(job)
        self._request_turn()

    def end_of_turn(self) -> None:
        """Advance parked jobs round-robin for one allowance; ask for another turn if any
        remain.  A job that parks again while it finishes goes to the back of the line."""
        parked = self.parked
        meter = self.meter
        meter.left = self.turn_steps
        for _ in range(len(parked)):
            if meter.left <= 0:
                break
            job = parked.popleft()
            self.slices += 1
            try:
                finished = job.advance(meter)
            except Exception:  # last resort: the jobs handle their own errors
                log.exception("parked work failed and was dropped")
                continue
            if not finished:
                parked.append(job)
        meter.left = self.turn_steps
        if parked:
            self._request_turn()
