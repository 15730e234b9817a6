"""Running a model's policy change a slice per event-loop turn, for the management API.

Why: ``model/policychanges`` does its matching in slices of bounded work so that the request
that asked for a change waits for it and the other connections on the loop do not.  This is the
one place that awaits between slices, for the policy handlers and the definitions import alike.
The definitions import and export are generators of short steps (an item each), run here a
slice of steps per loop turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import Any, Final, TypeVar

from hutch_broker.model import policychanges

_running: set[asyncio.Task[None]] = set()  # strong references: the loop keeps only weak ones


async def apply_in_slices(change: policychanges.PolicyChange) -> None:
    """Run ``change`` a slice per loop turn; a client that goes away does not stop it halfway."""
    task = asyncio.get_running_loop().create_task(_slices(change))
    _running.add(task)
    task.add_done_callback(_running.discard)
    await asyncio.shield(task)


async def _slices(change: policychanges.PolicyChange) -> None:
    while not change.run(policychanges.SLICE_UNITS):  # noqa: ASYNC110 - yields, waits on nothing
        await asyncio.sleep(0)


# -- stepwise work (definitions import and export) ------------------------------------------

T = TypeVar("T")
SLICE_SECONDS: Final = 0.002  # one slice of steps: then the loop runs everyone else's work
SLICE_STEPS: Final = 200  # and at most this many steps, however fast each one is


async def run_steps(
    steps: Generator[None, None, T],
    *,
    seconds: float = SLICE_SECONDS,
    most: int = SLICE_STEPS,
) -> T:
    """Advance ``steps`` a slice per loop turn (``most`` steps or ``seconds``, whichever comes
    first) and return what it returns. One step must be short: an item, not a pass over all."""
    while True:
        deadline = time.perf_counter() + seconds
        for _ in range(most):
            try:
                next(steps)
            except StopIteration as done:
                result: T = done.value
                return result
            if time.perf_counter() >= deadline:
                break
        await asyncio.sleep(0)


async def run_steps_to_the_end(steps: Generator[None, None, T]) -> T:
    """``run_steps`` in a shielded task: a client that goes away does not stop it halfway."""
    task = asyncio.get_running_loop().create_task(run_steps(steps))
    _stepping.add(task)
    task.add_done_callback(_stepping.discard)
    return await asyncio.shield(task)


_stepping: set[asyncio.Task[Any]] = set()
