"""One policy put or delete, applied to a vhost's entities in slices of bounded work (POL-7).

Why this module exists: a policy change must re-evaluate which policy applies to every queue
and exchange of the vhost, and the broker has one event loop.  Done in one go, a policy with an
expensive pattern over 40 long names held the loop for 39 s.  A ``PolicyChange`` is advanced
with a budget of work units (``automata``'s units, about 30 ns each) and returns when the budget
is spent; the HTTP handler awaits between calls, so only the request that asked for the change
waits for it.  Imports and recovery run it to completion in one call.

The work is incremental: only the changed policy is searched against each entity, except for
entities whose policy was the changed or deleted one; those are searched against the policies
best first (``policies.ranked``) and stop at the first match.

Phases, and why each is safe while other work runs between slices:
1. computing: which policy each entity will have.  The vhost's table is unchanged, so a queue or
   exchange declared meanwhile gets the old policy at declare time and is added here
   (``include``); one deleted meanwhile is skipped when the result is installed.
2. install: the table changes and the change is persisted, in one step.  From here on a declare
   matches against the new table.
3. applying: each computed policy is written onto its entity with the settings it makes
   effective, a bounded number per slice.  Between two slices some entities still carry the old
   policy, as in RabbitMQ, where each queue process applies a policy change on its own.

Changes of one vhost run one at a time, in order (``Host.policy_changes``): each computes against
the table the previous ones left, and whoever advances a change also advances those before it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

from hutch_broker.model import automata, changes, patterns, streamargs
from hutch_broker.model import policies as policies_mod
from hutch_broker.model.exchanges import Exchange
from hutch_broker.model.policies import Policy
from hutch_broker.model.queues import Queue

SLICE_UNITS: Final = 30_000  # one HTTP slice: about 1-2 ms of matching on a loaded machine
TAKE_UNITS: Final = 20  # looking at one entity, whether or not it needs a search
APPLY_UNITS: Final = 300  # writing one entity's policy and settings, in the same units
UNLIMITED: Final = automata.UNLIMITED

Entity = Queue | Exchange


class Host(Protocol):
    """What a change reads and writes of its vhost (``VirtualHost`` is one)."""

    name: str
    queues: dict[str, Queue]
    exchanges: dict[str, Exchange]
    policies: dict[str, Policy]
    operator_policies: dict[str, Policy]
    policy_changes: deque[PolicyChange]
    clock: Callable[[], int]
    on_definitions_changed: changes.ChangeListener


class PolicyChange:
    """Put ``policy`` (or delete the policy ``name`` when ``policy`` is None) in ``host``."""

    def __init__(self, host: Host, *, name: str, policy: Policy | None, operator: bool) -> None:
        self.host, self.name, self.policy, self.operator = host, name, policy, operator
        self.finished = False
        self.everything = False  # re-evaluate every entity against the table as it is (imports)
        self._phase = "waiting"
        self._todo: deque[Entity] = deque()
        self._ranked: list[Policy] = []
        self._old: dict[str, Policy] = {}
        self._entity: Entity | None = None
        self._candidates: list[Policy] = []  # searched in order, from ``_next`` on
        self._next = 0
        self._fallback: Policy | None = None
        self._search: patterns.Searching | None = None
        self._results: deque[tuple[Entity, Policy | None, Policy | None]] = deque()

    def run(self, budget: int = UNLIMITED) -> bool:
        """Advance this change (and those queued before it) by about ``budget`` units.

        Returns True once this change is completely applied.
        """
        queue = self.host.policy_changes
        spent = 0
        while not self.finished and spent < budget:
            head = queue[0]
            try:
                spent += head._work(budget - spent)
            except BaseException:
                head.finished = True  # never retried forever: the changes behind it go on
                queue.popleft()
                raise
            if head.finished:
                queue.popleft()
        return self.finished

    def include(self, entity: Entity) -> None:
        """An entity declared while this change computes: it must be evaluated too."""
        if self._phase == "computing" and self._kind(entity) is not None:
            self._todo.append(entity)

    # -- the phases ----------------------------------------------------------------------

    def _work(self, budget: int) -> int:
        if self._phase == "waiting":
            self._start()
        spent = 0
        if self._phase == "computing":
            spent += self._compute(budget)
            if self._phase == "computing":
                return spent
            self._install()
        spent += self._apply(budget - spent)
        return spent

    def _start(self) -> None:
        table = self._table()
        self._old = dict(table)
        after = dict(table)
        if self.everything:
            pass
        elif self.policy is None:
            after.pop(self.name, None)
        else:
            after[self.name] = self.policy
        self._ranked = policies_mod.ranked(after.values())
        self._todo.extend(self.host.queues.values())
        if not self.operator:
            self._todo.extend(self.host.exchanges.values())
        self._phase = "computing"

    def _compute(self, budget: int) -> int:
        spent = 0
        while spent < budget:
            if self._search is None:
                entity = self._entity
                if entity is None:
                    if not self._todo:
                        self._phase = "installing"
                        break
                    self._take(self._todo.popleft())
                    spent += TAKE_UNITS
                    continue
                if self._next == len(self._candidates):
                    self._decide(entity, self._fallback)
                    continue
                self._search = self._candidates[self._next].begin_search(entity.name)
            spent += self._search.advance(budget - spent) + 1
            if self._search.result is None:
                break
            assert self._entity is not None  # noqa: S101 - a search is always of the entity in hand
            self._after_search(self._entity, self._search.result)
        return spent

    def _after_search(self, entity: Entity, matched: bool) -> None:
        candidate = self._candidates[self._next]
        self._next += 1
        self._search = None
        if matched:
            self._decide(entity, candidate)

    def _take(self, entity: Entity) -> None:
        """What must be searched for ``entity``: the new policy, or every policy best first."""
        kind = self._kind(entity)
        self._entity = entity
        self._candidates, self._next, self._fallback = [], 0, None
        if kind is None:
            self._decide(entity, None)
            return
        current = self._current(entity)
        if self.everything or (current is not None and current.name == self.name):
            self._candidates = [p for p in self._ranked if p.applies_to(kind)]
            return
        self._fallback = current
        new = self.policy
        if new is not None and new.applies_to(kind) and new.outranks(current):
            self._candidates = [new]

    def _decide(self, entity: Entity, policy: Policy | None) -> None:
        current = self._current(entity)
        if policy is not current or self.everything:  # everything: definitions may have changed
            self._results.append((entity, current, policy))
        self._entity, self._candidates, self._next, self._search = None, [], 0, None

    def _install(self) -> None:
        table = self._table()
        if self.everything:
            pass  # the table is already what it should be: only the entities are behind
        elif self.policy is None:
            removed = table.pop(self.name, None)
            if removed is not None:
                self._persist(removed, deleted=True)
        else:
            table[self.name] = self.policy
            self._persist(self.policy, deleted=False)
        self._phase = "applying"

    def _persist(self, policy: Policy, *, deleted: bool) -> None:
        change = changes.policy_change(
            self.host.name, policy, operator=self.operator, deleted=deleted
        )
        self.host.on_definitions_changed(change)

    def _apply(self, budget: int) -> int:
        spent = 0
        while self._results and spent < budget:
            entity, before, after = self._results.popleft()
            spent += APPLY_UNITS
            if not self._alive(entity) or self._current(entity) is not before:
                continue  # deleted meanwhile, or re-evaluated since by a declare
            if isinstance(entity, Exchange):
                policies_mod.install_on_exchange(entity, after)
            elif self.operator:
                entity.operator_policy = after
                policies_mod.settle_queue(entity, clock=self.host.clock)
            else:
                entity.policy = after
                policies_mod.settle_queue(entity, clock=self.host.clock)
        if not self._results:
            self.finished = True
        return spent

    # -- helpers -------------------------------------------------------------------------

    def _table(self) -> dict[str, Policy]:
        return self.host.operator_policies if self.operator else self.host.policies

    def _kind(self, entity: Entity) -> str | None:
        if isinstance(entity, Queue):
            return policies_mod.queue_kind(entity.quorum, streamargs.is_stream(entity.arguments))
        if self.operator or entity.name == "":
            return None  # operator policies never apply to exchanges; the default one has none
        return "exchange"

    def _current(self, entity: Entity) -> Policy | None:
        if isinstance(entity, Queue):
            current: Policy | None = entity.operator_policy if self.operator else entity.policy
            return current
        if entity.policy_name is None:
            return None
        return self._old.get(entity.policy_name)

    def _alive(self, entity: Entity) -> bool:
        if isinstance(entity, Queue):
            return self.host.queues.get(entity.name) is entity
        return self.host.exchanges.get(entity.name) is entity
