"""Running a model's policy change a slice per event-loop turn, for the management API.

Why: ``model/policychanges`` does its matching in slices of bounded work so that the request
that asked for a change waits for it and the other connections on the loop do not.  This is the
one place that awaits between slices, for the policy handlers and the definitions import alike.
"""

from __future__ import annotations

import asyncio

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
