"""Regex search over entity names in bounded time, for policy patterns (POL-2).

Why this module exists: Python's ``re`` backtracks and has no timeout, so one
policy pattern such as ``^(a+)+$`` and a queue named ``aaaa…a-`` froze every
connection for seconds, doubling per character.  A pattern is parsed here with
the stdlib's own parser (``re._parser``), so what counts as valid, and what
each character class, anchor and flag means, is exactly Python's.  The
structure (sequence, ``|``, groups, quantifiers) is then compiled into a small
Thompson NFA and searched with a set of live states, one name character at a
time: the cost is O(program size x name length), and names are at most 255
bytes.  The leaves, each one character or one zero-width anchor, are still
evaluated by ``re`` on a single position, which is constant time.

Patterns too simple to backtrack badly (at most one quantifier, over a single
character, and at most one ``|`` group) keep the plain ``re`` search: it is
faster and provably at most quadratic in the name.  Features outside regular
languages (backreferences, lookaround, conditionals) and those whose meaning
depends on backtracking order (atomic groups, possessive quantifiers) are
refused with ``UnsupportedPatternError``; RabbitMQ would accept them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from re import _compiler, _parser  # type: ignore[attr-defined]
from re import _constants as sre  # type: ignore[attr-defined]
from typing import Any, Final, Protocol

from hutch_broker.model import automata

MAX_PROGRAM: Final = 1000  # NFA instructions; one uncached DFA step costs at most about this

_CHAR, _SPLIT, _JUMP, _ASSERT, _MATCH = (
    automata.CHAR,
    automata.SPLIT,
    automata.JUMP,
    automata.ASSERT,
    automata.MATCH,
)
_LEAVES: Final = frozenset({sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN})
_REPEATS: Final = frozenset({sre.MAX_REPEAT, sre.MIN_REPEAT})
_UNSUPPORTED: Final = {
    sre.GROUPREF: "a backreference",
    sre.GROUPREF_EXISTS: "a conditional group",
    sre.ASSERT: "a lookahead or lookbehind",
    sre.ASSERT_NOT: "a negative lookahead or lookbehind",
    sre.ATOMIC_GROUP: "an atomic group",
    sre.POSSESSIVE_REPEAT: "a possessive quantifier",
}

Node = tuple[Any, Any]  # (opcode, argument) as re._parser produces them


class PatternError(ValueError):
    """A pattern that cannot be used; ``str()`` says why."""


class InvalidPatternError(PatternError):
    """Not a regular expression at all (``re`` refuses it)."""


class UnsupportedPatternError(PatternError):
    """A valid regex that needs backtracking or is too large to search in bounded time."""


class Searching(Protocol):
    """One search under way: ``advance`` works up to a budget; ``result`` is None until known."""

    result: bool | None

    def advance(self, budget: int = ...) -> int: ...


class Matcher(Protocol):
    def search(self, text: str) -> bool: ...

    def begin(self, text: str) -> Searching: ...


# Patterns compiled ahead of a definitions import, off the event loop (``precompiled``).
_precompiled: dict[str, Matcher | PatternError] = {}


def compile_ahead(patterns: Iterable[str]) -> dict[str, Matcher | PatternError]:
    """Each distinct pattern compiled, or the error compiling it raised (run in a thread)."""
    compiled: dict[str, Matcher | PatternError] = {}
    for pattern in patterns:
        if pattern not in compiled:
            try:
                compiled[pattern] = compile_pattern(pattern)
            except PatternError as exc:
                compiled[pattern] = exc
    return compiled


@contextmanager
def precompiled(compiled: dict[str, Matcher | PatternError]) -> Iterator[None]:
    """Within the block, ``compile_pattern`` answers from ``compiled`` first (an import)."""
    _precompiled.update(compiled)
    try:
        yield
    finally:
        for pattern in compiled:
            _precompiled.pop(pattern, None)


def compile_pattern(pattern: str) -> Matcher:
    """A matcher whose ``search`` finds ``pattern`` anywhere in a name, like ``re.search``."""
    ready = _precompiled.get(pattern)
    if isinstance(ready, PatternError):
        raise ready
    if ready is not None:
        return ready
    parsed = _parse(pattern)
    _refuse_unsupported(parsed)
    if _is_simple(parsed):
        return _ReSearch(re.compile(pattern))
    return automata.Automaton(_Builder(parsed.state.flags).program(list(parsed)))


def compile_nfa(pattern: str) -> Matcher:
    """Always the automaton, even where ``re`` would be safe (tests hold it to ``re.search``)."""
    parsed = _parse(pattern)
    _refuse_unsupported(parsed)
    return automata.Automaton(_Builder(parsed.state.flags).program(list(parsed)))


def _parse(pattern: str) -> Any:
    try:
        return _parser.parse(pattern)
    except re.error as exc:
        raise InvalidPatternError(str(exc)) from exc
    except RecursionError:
        raise InvalidPatternError("groups nest too deeply") from None
    except (OverflowError, ValueError) as exc:
        raise InvalidPatternError(str(exc)) from exc


def _walk(nodes: list[Node]) -> list[Node]:
    """Every node of a parsed tree, depth first (iterative: trees may be deep)."""
    found: list[Node] = []
    pending = list(nodes)
    while pending:
        node = pending.pop()
        found.append(node)
        pending.extend(_children(node))
    return found


def _children(node: Node) -> list[Node]:
    op, arg = node
    if op in _REPEATS or op is sre.POSSESSIVE_REPEAT:
        return list(arg[2])
    if op is sre.SUBPATTERN:
        return list(arg[3])
    if op is sre.BRANCH:
        return [child for alternative in arg[1] for child in alternative]
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return list(arg[1])
    if op is sre.ATOMIC_GROUP:
        return list(arg)
    if op is sre.GROUPREF_EXISTS:
        return [*arg[1], *(arg[2] or [])]
    return []


def _refuse_unsupported(parsed: Any) -> None:
    for op, _arg in _walk(list(parsed)):
        feature = _UNSUPPORTED.get(op)
        if feature is not None:
            raise UnsupportedPatternError(
                f"uses {feature}, which hutch-broker does not support in policy patterns "
                "(they are matched in linear time, without backtracking)"
            )


def _is_simple(parsed: Any) -> bool:
    """At most one quantifier, over one character, and one ``|``: ``re`` is safe here."""
    nodes = _walk(list(parsed))
    repeats = [arg for op, arg in nodes if op in _REPEATS]
    branches = [arg for op, arg in nodes if op is sre.BRANCH]
    if len(repeats) > 1 or len(branches) > 1:
        return False
    return all(len(body) == 1 and body[0][0] in _LEAVES for _min, _max, body in repeats)


@dataclass(frozen=True, slots=True)
class _ReSearch:
    regex: re.Pattern[str]

    def search(self, text: str) -> bool:
        return self.regex.search(text) is not None

    def begin(self, text: str) -> Searching:
        return _OneShot(self.regex, text)


class _OneShot:
    """A ``re`` search as a ``Searching``: done in one call, charged by the name's length."""

    __slots__ = ("regex", "result", "text")

    def __init__(self, regex: re.Pattern[str], text: str) -> None:
        self.regex, self.text = regex, text
        self.result: bool | None = None

    def advance(self, budget: int = automata.UNLIMITED) -> int:
        if self.result is not None:
            return 0
        self.result = self.regex.search(self.text) is not None
        return 4 * (len(self.text) + 1)  # ``re`` here is at most quadratic, in C


class _Builder:
    """Compiles a parsed tree into a ``Program``; leaves are compiled by ``re`` itself, once
    per distinct leaf (``(.)*`` repeated 240 times has one)."""

    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.ops: list[int] = []
        self.targets: list[tuple[int, ...]] = []
        self.leaves: list[int] = []
        self.tests: list[re.Pattern[str]] = []
        self.literals: list[str | None] = []
        self.leaf_ids: dict[tuple[str, int], int] = {}

    def program(self, nodes: list[Node]) -> automata.Program:
        try:
            self._sequence(nodes, self.flags)
        except RecursionError:
            raise UnsupportedPatternError("groups nest too deeply") from None
        self._emit(_MATCH)
        return automata.Program(
            tuple(self.ops),
            tuple(self.targets),
            tuple(self.leaves),
            tuple(self.tests),
            tuple(self.literals),
        )

    def _emit(self, op: int, targets: tuple[int, ...] = (), leaf: int = -1) -> int:
        if len(self.ops) >= MAX_PROGRAM:
            raise UnsupportedPatternError(
                f"is too large: it expands to more than {MAX_PROGRAM} matching steps"
            )
        self.ops.append(op)
        self.targets.append(targets)
        self.leaves.append(leaf)
        return len(self.ops) - 1

    def _leaf(self, node: Node, flags: int) -> int:
        key = (repr(node), flags)
        leaf = self.leaf_ids.get(key)
        if leaf is None:
            leaf = self.leaf_ids[key] = len(self.tests)
            self.tests.append(_leaf(node, flags))
            self.literals.append(_literal(node, flags))
        return leaf

    def _patch(self, pc: int, targets: tuple[int, ...]) -> None:
        self.targets[pc] = targets

    def _sequence(self, nodes: list[Node], flags: int) -> None:
        for node in nodes:
            self._node(node, flags)

    def _node(self, node: Node, flags: int) -> None:
        op, arg = node
        if op in _LEAVES:
            self._emit(_CHAR, leaf=self._leaf(node, flags))
        elif op is sre.AT:
            self._emit(_ASSERT, leaf=self._leaf(node, flags))
        elif op is sre.SUBPATTERN:
            _group, add_flags, del_flags, body = arg
            self._sequence(list(body), (flags | add_flags) & ~del_flags)
        elif op is sre.BRANCH:
            self._branch([list(alternative) for alternative in arg[1]], flags)
        elif op in _REPEATS:
            least, most, body = arg
            self._repeat(list(body), least, most, flags)
        else:
            raise UnsupportedPatternError(f"uses {op}, which hutch-broker does not support")

    def _branch(self, alternatives: list[list[Node]], flags: int) -> None:
        jumps: list[int] = []
        for alternative in alternatives[:-1]:
            split = self._emit(_SPLIT)
            self._sequence(alternative, flags)
            jumps.append(self._emit(_JUMP))
            self._patch(split, (split + 1, len(self.ops)))
        self._sequence(alternatives[-1], flags)
        for jump in jumps:
            self._patch(jump, (len(self.ops),))

    def _repeat(self, body: list[Node], least: int, most: int, flags: int) -> None:
        if not any(op in _LEAVES or op is sre.AT for op, _arg in _walk(body)):
            return  # only the empty string, however often: `(?:){4294967294}` costs nothing
        for _ in range(least):
            self._sequence(body, flags)
        if most == sre.MAXREPEAT:
            split = self._emit(_SPLIT)
            self._sequence(body, flags)
            self._emit(_JUMP, (split,))
            self._patch(split, (split + 1, len(self.ops)))
            return
        optional = [self._optional(body, flags) for _ in range(most - least)]
        for split in optional:
            self._patch(split, (split + 1, len(self.ops)))

    def _optional(self, body: list[Node], flags: int) -> int:
        """One more copy of ``body`` that may be skipped; the split is patched by the caller."""
        split = self._emit(_SPLIT)
        self._sequence(body, flags)
        return split


def _literal(node: Node, flags: int) -> str | None:
    """The one character a leaf matches, when that needs no ``re`` call to know."""
    op, arg = node
    if op is sre.LITERAL and not flags & (sre.SRE_FLAG_IGNORECASE | sre.SRE_FLAG_LOCALE):
        return chr(arg)
    return None


def _leaf(node: Node, flags: int) -> re.Pattern[str]:
    """``re``'s own matcher for one character test or anchor, under ``flags``."""
    state = _parser.State()
    state.flags = flags
    compiled: re.Pattern[str] = _compiler.compile(_parser.SubPattern(state, [node]), 0)
    return compiled
