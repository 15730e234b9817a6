"""The policy search of a queue or exchange declared over HTTP, a slice per loop turn.

Why: a declare matches the new name against its vhost's policies (POL-2), and patterns whose
DFA thrashes its bounded cache cost milliseconds per policy and name; ten of them held the loop
for about 180 ms per declare.  AMQP declares park their connection for that search
(``dispatch.declares``); an HTTP ``PUT`` of a queue or exchange awaits it here, a slice per loop
turn, so only the request that asked waits.  Nothing is changed until the search is done, so a
client that goes away meanwhile leaves nothing half done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from hutch_broker.model.policymatch import PolicyMatch

SLICE_UNITS: Final = 30_000  # as a policy change's slice: about 1-2 ms of matching


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
