"""Which policy a queue or exchange about to be declared gets, found in resumable slices.

Why this module exists: a declare matches the new name against every policy of its vhost
(POL-2), and the broker has one event loop.  The lazy DFA (``automata``) makes most patterns
cheap, but a policymaker can still choose patterns whose DFA thrashes its bounded cache: each
character then costs O(program), and ten such policies cost about 180 ms per declare.  A
``PolicyMatch`` searches the policies best first, stops at the first match (the best one,
exactly as ``policies.best_match``), and works at most about a given budget per call, so the
AMQP layer can spread a declare over several loop turns (``dispatch.declares``).

The match is computed against the tables as they were when it began.  ``current`` tells the
caller whether they are still the same objects in the same order; if a policy change was
installed meanwhile, the caller starts a new match rather than declaring with a stale answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from hutch_broker.model import automata, patterns
from hutch_broker.model import policies as policies_mod
from hutch_broker.model.policies import Policy

UNLIMITED = automata.UNLIMITED
TAKE_UNITS = 20  # looking at one candidate policy, whether or not it is searched


class PolicyMatch:
    """The best policy (and, for queues, operator policy) for ``name`` of ``kind``."""

    def __init__(
        self,
        name: str,
        kind: str,
        policies: Mapping[str, Policy],
        operator_policies: Mapping[str, Policy] | None,
    ) -> None:
        self.name, self.kind = name, kind
        self._tables = (policies, operator_policies)
        self._seen = (tuple(policies.values()), _values(operator_policies))
        self._lanes = [
            [p for p in policies_mod.ranked(policies.values()) if p.applies_to(kind)],
            [p for p in policies_mod.ranked(_values(operator_policies)) if p.applies_to(kind)],
        ]
        self.found: list[Policy | None] = [None, None]
        self._lane = 0
        self._next = 0
        self._search: patterns.Searching | None = None
        self.done = False
        self.taken = 0  # units spent so far, over every call (for tests and metrics)

    @property
    def policy(self) -> Policy | None:
        return self.found[0]

    @property
    def operator_policy(self) -> Policy | None:
        return self.found[1]

    @property
    def searches(self) -> int:
        """How many policies a declare would have had to search (for the cheap-path test)."""
        return len(self._lanes[0]) + len(self._lanes[1])

    def advance(self, budget: int = UNLIMITED) -> int:
        """Search while about ``budget`` units last (one uncached DFA step may overrun it);
        returns the units spent.  ``done`` once both answers are known."""
        spent = 0
        while not self.done and spent < budget:
            lane = self._lanes[self._lane]
            if self._search is None:
                if self._next == len(lane):
                    self._next_lane()
                    continue
                self._search = lane[self._next].begin_search(self.name)
                spent += TAKE_UNITS
            search = self._search
            spent += search.advance(max(budget - spent, 1))
            if search.result is None:
                break
            self._search = None
            if search.result:
                self.found[self._lane] = lane[self._next]
                self._next_lane()
            else:
                self._next += 1
        self.taken += spent
        return spent

    def _next_lane(self) -> None:
        self._lane += 1
        self._next = 0
        if self._lane == len(self._lanes):
            self.done = True

    def finish(self) -> None:
        """Run to the end in one call (callers that cannot wait)."""
        self.advance(UNLIMITED)

    def current(self, kind: str) -> bool:
        """Whether the answer still holds: same kind, and the same policy objects in the tables."""
        policies, operators = self._tables
        return (
            kind == self.kind
            and _same(self._seen[0], tuple(policies.values()))
            and _same(self._seen[1], _values(operators))
        )


def _values(table: Mapping[str, Policy] | None) -> tuple[Policy, ...]:
    return () if table is None else tuple(table.values())


def _same(before: tuple[Policy, ...], now: tuple[Policy, ...]) -> bool:
    return len(before) == len(now) and all(a is b for a, b in zip(before, now, strict=True))
