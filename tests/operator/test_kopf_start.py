"""Kopf's start-up gate with indexes wakes each waiting worker once, not once per object.

Kopf 1.45 holds every object's first handler until all objects are indexed (one "off" toggle
per object in a ``ToggleSet(all)``), and notified every waiter on every toggle added or
dropped: O(n²) wake-ups, which kept a restarted operator with 10,000 Queues from settling.
``kopfpatches`` notifies only when the set's truth value changes. Counted here with the real
ToggleSet: how often the waiters' predicate runs while n objects are indexed.
"""

from __future__ import annotations

import asyncio

from hutch_operator.core import kopfpatches
from kopf._cogs.aiokits import aiotoggles

OBJECTS = 400


async def test_waiters_wake_once_when_the_last_object_is_indexed() -> None:
    assert kopfpatches.apply()
    gate = aiotoggles.ToggleSet(all)
    checks = 0
    original = gate.is_on

    def counted() -> bool:
        nonlocal checks
        checks += 1
        return original()

    gate.is_on = counted  # type: ignore[method-assign]
    toggles = [await gate.make_toggle(name=f"q{i}") for i in range(OBJECTS)]
    waiters = [asyncio.create_task(gate.wait_for(True)) for _ in range(OBJECTS)]
    await asyncio.sleep(0)
    for toggle in toggles:  # each object indexed in turn, as Kopf's workers do
        await gate.drop_toggle(toggle)
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*waiters), timeout=5)
    # Linear: a few checks per object. Kopf's own ToggleSet made OBJECTS² / 2 (80,000) here.
    assert checks < 10 * OBJECTS, checks


async def test_the_gate_still_opens_and_closes() -> None:
    kopfpatches.apply()
    gate = aiotoggles.ToggleSet(all)
    assert gate.is_on()
    first = await gate.make_toggle(name="a")
    second = await gate.make_toggle(name="b")
    waiter = asyncio.create_task(gate.wait_for(True))
    await gate.drop_toggles([first])
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await gate.drop_toggle(second)
    await asyncio.wait_for(waiter, timeout=1)
    paused = aiotoggles.ToggleSet(any)  # Kopf's pause set: toggles that turn on by themselves
    flag = await paused.make_toggle(name="peering")
    resumed = asyncio.create_task(paused.wait_for(True))
    await flag.turn_to(True)
    await asyncio.wait_for(resumed, timeout=1)
