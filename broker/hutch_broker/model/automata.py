"""A lazily built DFA over a pattern's Thompson program, with bounded memory and resumable searches.

Why this module exists: simulating the NFA costs O(program) per name character, and a
1,000-step program over a 255-character name held the event loop for a second: a policy
``(.*)`` x 240 + ``b`` applied to 40 queues froze every connection for 39 s.  Here each set of
live NFA states met while searching becomes a DFA state, and each (state, character class,
assertions) step is computed once, in O(program), then cached: a name costs O(name length)
dictionary lookups once the states it needs exist.  A step never computed before still costs
O(program), so a search is also *resumable*: ``Search.advance(budget)`` stops after about
``budget`` units of work and continues from the same position on the next call, which lets a
policy change interleave its matching with everyone else's work (``model/policychanges``).

Bounded by construction:
- states are bitmasks of program counters, at most ``MAX_STATES`` cached per pattern, and at most
  ``MAX_TRANSITIONS`` cached steps; when either is full the cache is flushed (as RE2 does), so an
  adversarial pattern whose DFA is exponential costs O(program) per character, never memory;
- characters map to classes (the set of the program's character tests they pass), at most
  ``MAX_CHARACTERS`` remembered; beyond that a character's class is recomputed each time;
- zero-width assertions (``^``, ``$``, ``\\b`` ...) are evaluated by ``re`` at each position of
  the text, once per distinct assertion, and their outcome is part of the step's cache key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

CHAR, SPLIT, JUMP, ASSERT, MATCH = range(5)

MAX_STATES: Final = 128
MAX_TRANSITIONS: Final = 2048
MAX_CHARACTERS: Final = 512
UNLIMITED: Final = 1 << 62
# Work is counted in units of about one cached step (30-60 ns here): one ``re`` test costs
# about ten, one program instruction visited while computing a step about five.
TEST_UNITS: Final = 10
INSTRUCTION_UNITS: Final = 5
STEP_UNITS: Final = 50  # the fixed part of computing and caching one step

_MATCHED: Final = -1  # a step that reached MATCH: the search has found the pattern
_END: Final = 0  # the character class of "end of text"


@dataclass(frozen=True, slots=True)
class Program:
    """Instructions as parallel tuples.  ``leaves[pc]`` indexes ``tests`` for CHAR and ASSERT."""

    ops: tuple[int, ...]
    targets: tuple[tuple[int, ...], ...]  # SPLIT: two; JUMP: one; others: none
    leaves: tuple[int, ...]  # -1 where the instruction has no test
    tests: tuple[re.Pattern[str], ...]  # distinct leaves: one character test or one anchor
    literals: tuple[str | None, ...] = ()  # per test: the one character it matches, if known


class Search:
    """One name being searched for one pattern; ``result`` is None until it is known."""

    __slots__ = ("_automaton", "_position", "_state", "result", "text")

    def __init__(self, automaton: Automaton, text: str) -> None:
        self._automaton = automaton
        self.text = text
        self._position = 0
        self._state = 1  # pc 0, where an unanchored search starts at every position
        self.result: bool | None = None

    def advance(self, budget: int = UNLIMITED) -> int:
        """Work until the result is known or about ``budget`` units are spent; returns the units."""
        if self.result is not None:
            return 0
        return self._automaton.advance(self, budget)


class Automaton:
    """The DFA cache of one program; ``search`` answers like ``re.search(pattern, text)``."""

    def __init__(self, program: Program) -> None:
        self.program = program
        pairs = list(zip(program.ops, program.leaves, strict=True))
        char_leaves = sorted({leaf for op, leaf in pairs if op == CHAR})
        literals = program.literals or (None,) * len(program.tests)
        self._literals: dict[str, list[int]] = {}  # character -> the literal tests it passes
        for leaf in char_leaves:
            literal = literals[leaf]
            if literal is not None:
                self._literals.setdefault(literal, []).append(leaf)
        self._char_tests = [
            (leaf, program.tests[leaf].fullmatch) for leaf in char_leaves if literals[leaf] is None
        ]
        assert_leaves = sorted({leaf for op, leaf in pairs if op == ASSERT})
        self._assert_tests = [program.tests[leaf].match for leaf in assert_leaves]
        self._assert_bit = {leaf: 1 << bit for bit, leaf in enumerate(assert_leaves)}
        self._amask_span = 1 << len(assert_leaves)
        self._flush()

    def _flush(self) -> None:
        self._masks: list[int] = []
        self._ids: dict[int, int] = {}
        self._steps: list[dict[int, int]] = []
        self._cached_steps = 0
        self._classes: list[frozenset[int]] = [frozenset()]  # class 0: end of text
        self._class_ids: dict[frozenset[int], int] = {}
        self._characters: dict[str, int] = {}

    def search(self, text: str) -> bool:
        found = Search(self, text)
        found.advance()
        return bool(found.result)

    def begin(self, text: str) -> Search:
        return Search(self, text)

    def cached(self) -> tuple[int, int, int]:
        """How many states, steps and characters are cached (bounded by the MAX_ constants)."""
        return len(self._masks), self._cached_steps, len(self._characters)

    # -- the search loop -----------------------------------------------------------------

    def advance(self, search: Search, budget: int) -> int:
        """``Search.advance``: the fast path is one or two dict lookups per character."""
        text, position, mask = search.text, search._position, search._state
        self._reserve(1)
        state = self._intern(mask)
        spent, length, span = 0, len(text), self._amask_span
        anchors = bool(self._assert_tests)
        while spent < budget:
            amask = self._assertions(text, position) if anchors else 0
            spent += 1 + TEST_UNITS * (span.bit_length() - 1)
            if position == length:
                cls = _END
            else:
                cls = self._characters.get(text[position], -1)
                if cls < 0:
                    cls = self._classify(text[position])
                    spent += TEST_UNITS * len(self._char_tests)
                    state = self._intern(mask)  # the class table may have been flushed
            target = self._steps[state].get(cls * span + amask)
            if target is None:
                target, cost = self._step(mask, cls, amask)
                spent += cost
            if target == _MATCHED or position == length:
                search.result = target == _MATCHED
                return spent
            state, mask = target, self._masks[target]
            position += 1
        search._position, search._state = position, mask
        return spent

    def _assertions(self, text: str, position: int) -> int:
        """Which anchors hold at ``position``, one bit each."""
        amask = 0
        for bit, test in enumerate(self._assert_tests):
            if test(text, position) is not None:
                amask |= 1 << bit
        return amask

    def _classify(self, char: str) -> int:
        """The class of ``char``: the set of character tests it passes (may flush the cache)."""
        passed = frozenset(
            [
                *self._literals.get(char, ()),
                *(index for index, test in self._char_tests if test(char) is not None),
            ]
        )
        cls = self._class_ids.get(passed)
        if cls is None:
            if len(self._classes) >= MAX_CHARACTERS:
                self._flush()
            cls = len(self._classes)
            self._classes.append(passed)
            self._class_ids[passed] = cls
        if len(self._characters) < MAX_CHARACTERS:
            self._characters[char] = cls
        return cls

    def _reserve(self, states: int) -> None:
        """Flush first if ``states`` more states or one more step would pass the bounds."""
        if len(self._masks) + states > MAX_STATES or self._cached_steps >= MAX_TRANSITIONS:
            classes, class_ids, characters = self._classes, self._class_ids, self._characters
            self._flush()  # classes stay: they do not grow with the states
            self._classes, self._class_ids, self._characters = classes, class_ids, characters

    def _intern(self, mask: int) -> int:
        state = self._ids.get(mask)
        if state is None:
            state = len(self._masks)
            self._masks.append(mask)
            self._ids[mask] = state
            self._steps.append({})
        return state

    def _step(self, mask: int, cls: int, amask: int) -> tuple[int, int]:
        """The state after reading one character of class ``cls`` from ``mask``, computed."""
        live, matched, cost = self._closure(mask, amask)
        self._reserve(2)
        source = self._intern(mask)
        if matched:
            target = _MATCHED
        elif cls == _END:
            target = _MATCHED - 1  # no match at the end: any value the loop stops on
        else:
            leaves, passed = self.program.leaves, self._classes[cls]
            following = 1  # pc 0: an unanchored search also starts at the next position
            for pc in live:
                if leaves[pc] in passed:
                    following |= 1 << (pc + 1)
            target = self._intern(following)
            cost += len(live)
        self._steps[source][cls * self._amask_span + amask] = target
        self._cached_steps += 1
        return target, STEP_UNITS + INSTRUCTION_UNITS * cost

    def _closure(self, mask: int, amask: int) -> tuple[list[int], bool, int]:
        """CHAR instructions reachable from ``mask`` without consuming; whether MATCH is."""
        ops, targets, leaves = self.program.ops, self.program.targets, self.program.leaves
        seen = bytearray(len(ops))
        pending = _bits(mask)
        live: list[int] = []
        cost = len(pending)
        while pending:
            pc = pending.pop()
            if seen[pc]:
                continue
            seen[pc] = 1
            cost += 1
            op = ops[pc]
            if op == CHAR:
                live.append(pc)
            elif op == MATCH:
                return live, True, cost
            elif op == ASSERT:
                if amask & self._assert_bit[leaves[pc]]:
                    pending.append(pc + 1)
            else:
                pending.extend(targets[pc])
        return live, False, cost


def _bits(mask: int) -> list[int]:
    """The positions of the set bits of ``mask``, in any order."""
    found = []
    while mask:
        low = mask & -mask
        found.append(low.bit_length() - 1)
        mask ^= low
    return found
