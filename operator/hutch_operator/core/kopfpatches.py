"""Two fixes for Kopf 1.45 at 10,000 objects: a linear start-up gate, no ``managedFields``.

Why: with any ``kopf.index`` on a kind, Kopf holds every object's first handler until all
objects of all indexed kinds are indexed. Each object's worker adds an "off" toggle to one
``ToggleSet(all)`` and later drops it, then waits on the set's condition; every add and every
drop calls ``notify_all``, so each of up to n waiting workers wakes, re-takes the lock and
re-checks, n times: O(n²) wake-ups. At 10,000 Queues an operator restart indexed 3,900 objects
in 3 minutes and slowed down as it went (bench/operator_bench.py); 1,000 took 3 s.

The fix notifies only when the set's truth value changed, which is the only thing its waiters
wait for: adding an off toggle to a set that is already off, or dropping one toggle of many,
changes nothing, so each waiter wakes once, when the last toggle goes. Toggles turned on or off
by themselves still notify through the shared condition, as before.

``metadata.managedFields`` (the apiserver's server-side-apply bookkeeping: one entry per field
manager, each a nested map of every field it set) is dropped from every listed and watched
object as it comes off the stream. Neither Kopf nor the operator reads it, yet Kopf keeps each
object's body while its worker waits at the start-up gate or lags behind the watch, so at
10,000 objects these copies were a large share of the operator's RSS (docs/isolation/operator.md).

The patches are applied for the Kopf version they were written against only; with another
version Kopf is left as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import kopf
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching

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


def strip(raw: Any) -> Any:
    """A raw list item or watch event without ``metadata.managedFields`` (changed in place)."""
    if isinstance(raw, dict):
        body = raw.get("object", raw)
        metadata = body.get("metadata") if isinstance(body, dict) else None
        if isinstance(metadata, dict):
            metadata.pop("managedFields", None)
    return raw


_continuous_watch = watching.continuous_watch


async def _stripped_watch(**kwargs: Any) -> AsyncIterator[Any]:
    async for raw in _continuous_watch(**kwargs):
        yield strip(raw)


def apply() -> bool:
    """Patches Kopf's ToggleSet and its watch stream (idempotent); False when this Kopf version
    is not the known one."""
    if getattr(kopf, "__version__", "") not in PATCHED_VERSIONS:
        return False
    aiotoggles.ToggleSet.make_toggle = _make_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggle = _drop_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggles = _drop_toggles  # type: ignore[method-assign]
    watching.continuous_watch = _stripped_watch
    return True
