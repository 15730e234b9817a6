"""Declares and deletes over HTTP whose work grows with policies or bindings, a slice per turn.

Why: a declare matches the new name against its vhost's policies (POL-2), and patterns whose
DFA thrashes its bounded cache cost milliseconds per policy and name; ten of them held the loop
for about 180 ms per declare.  AMQP declares park their connection for that search
(``dispatch.declares``); an HTTP ``PUT`` of a queue or exchange awaits it here, a slice per loop
turn, so only the request that asked waits.  Nothing is changed until the search is done, so a
client that goes away meanwhile leaves nothing half done.

A ``DELETE`` of a queue or exchange with thousands of bindings removes them the same way
(``VirtualHost.unlink_within``), in a shielded task so that a client that goes away does not
leave the delete half done; the entity itself goes once it has no binding left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from hutch_broker.model import budgets
from hutch_broker.model.exchanges import Exchange
from hutch_broker.model.policymatch import PolicyMatch
from hutch_broker.model.queues import Queue
from hutch_broker.model.vhosts import VirtualHost

SLICE_UNITS: Final = 30_000  # as a policy change's slice: about 1-2 ms of matching
SLICE_STEPS: Final = 5_000  # bindings removed per slice: as a loop turn's routing allowance

_running: set[asyncio.Task[None]] = set()  # strong references: the loop keeps only weak ones


async def policy_match(begin: Callable[[], PolicyMatch | None]) -> PolicyMatch | None:
    """The finished search ``begin`` starts, against the tables as they are when it ends; None
    when there is nothing to search.  A cheap search finishes without awaiting."""
    match = begin()
    while match is not None:
        while not match.done:
            match.advance(SLICE_UNITS)
            if not match.done:
                await asyncio.sleep(0)
        if match.current(match.kind):
            return match
        match = begin()  # a policy change was installed meanwhile: search again
    return None


async def unlink_in_slices(vhost: VirtualHost, entity: Queue | Exchange) -> None:
    """Remove every binding of ``entity`` a slice per loop turn, to the end even if the client
    goes away (the entity stays, with the bindings not yet removed, until it is deleted)."""
    if vhost.unlink_within(entity, budgets.Meter(SLICE_STEPS)):
        return
    task = asyncio.get_running_loop().create_task(_unlink(vhost, entity))
    _running.add(task)
    task.add_done_callback(_running.discard)
    await asyncio.shield(task)


async def _unlink(vhost: VirtualHost, entity: Queue | Exchange) -> None:
    while not vhost.unlink_within(entity, budgets.Meter(SLICE_STEPS)):  # noqa: ASYNC110 - yields
        await asyncio.sleep(0)
