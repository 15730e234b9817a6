"""A fix for Kopf 1.45's start-up with indexes, which is quadratic in the number of objects.

Why: with any ``kopf.index`` on a kind, Kopf holds every object's first handler until all
objects of all indexed kinds are indexed. Each object's worker adds an "off" toggle to one
``ToggleSet(all)`` and later drops it, then waits on the set's condition; every add and every
drop calls ``notify_all``, so each of up to n waiting workers wakes, re-takes the lock and
re-checks, n times: O(n²) wake-ups. At 10,000 Queues an operator restart indexed 3,900 objects
in 3 minutes and slowed down as it went (bench/operator_bench.py); 1,000 took 3 s.

The fix notifies only when the set's truth value changed, which is the only thing its waiters
wait for: adding an off toggle to a set that is already off, or dropping one toggle of many,
changes nothing, so each waiter wakes once, when the last toggle goes. Toggles turned on or off
by themselves still notify through the shared condition, as before. The patch is applied for
the Kopf version it was written against only; with another version Kopf is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

import kopf
from kopf._cogs.aiokits import aiotoggles

PATCHED_VERSIONS = frozenset({"1.45.2"})


async def _make_toggle(
    self: aiotoggles.ToggleSet, __val: bool = False, *, name: str | None = None
) -> aiotoggles.Toggle:
    toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
    async with self._condition:
        before = self.is_on()
        self._toggles.add(toggle)
        if self.is_on() != before:
            self._condition.notify_all()
    return toggle


async def _drop_toggle(self: aiotoggles.ToggleSet, toggle: aiotoggles.Toggle) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.discard(toggle)
        if self.is_on() != before:
            self._condition.notify_all()


async def _drop_toggles(self: aiotoggles.ToggleSet, toggles: Iterable[aiotoggles.Toggle]) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.difference_update(toggles)
        if self.is_on() != before:
            self._condition.notify_all()


def apply() -> bool:
    """Patches Kopf's ToggleSet (idempotent); False when this Kopf version is not the known one."""
    if getattr(kopf, "__version__", "") not in PATCHED_VERSIONS:
        return False
    aiotoggles.ToggleSet.make_toggle = _make_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggle = _drop_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggles = _drop_toggles  # type: ignore[method-assign]
    return True
