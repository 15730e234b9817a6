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
from collections.abc import Callable
from dataclasses import dataclass
from re import _compiler, _parser  # type: ignore[attr-defined]
from re import _constants as sre  # type: ignore[attr-defined]
from typing import Any, Final, Protocol

MAX_PROGRAM: Final = 1000  # NFA instructions; a search costs at most this times len(name)

_CHAR, _SPLIT, _JUMP, _ASSERT, _MATCH = range(5)
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


class Matcher(Protocol):
    def search(self, text: str) -> bool: ...


def compile_pattern(pattern: str) -> Matcher:
    """A matcher whose ``search`` finds ``pattern`` anywhere in a name, like ``re.search``."""
    parsed = _parse(pattern)
    _refuse_unsupported(parsed)
    if _is_simple(parsed):
        return _ReSearch(re.compile(pattern))
    return _Builder(parsed.state.flags).program(list(parsed))


def compile_nfa(pattern: str) -> Matcher:
    """Always the NFA, even where ``re`` would be safe (tests hold it to ``re.search``)."""
    parsed = _parse(pattern)
    _refuse_unsupported(parsed)
    return _Builder(parsed.state.flags).program(list(parsed))


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


@dataclass(frozen=True, slots=True)
class _Program:
    """Instructions as parallel tuples; ``_CHAR`` and ``_ASSERT`` carry a one-position test."""

    ops: tuple[int, ...]
    targets: tuple[tuple[int, ...], ...]  # SPLIT: two; JUMP: one; others: none
    tests: tuple[Callable[..., Any], ...]  # a leaf's re match; ``_no_test`` elsewhere

    def search(self, text: str) -> bool:
        carried: list[int] = []
        for position in range(len(text) + 1):
            live, matched = self._closure([*carried, 0], text, position)  # 0: start here too
            if matched:
                return True
            if position == len(text):
                break
            char = text[position]
            tests = self.tests
            carried = [pc + 1 for pc in live if tests[pc](char) is not None]
        return False

    def _closure(self, starts: list[int], text: str, position: int) -> tuple[list[int], bool]:
        """Character-consuming states reachable without consuming; whether MATCH is one."""
        ops, targets, tests = self.ops, self.targets, self.tests
        seen: set[int] = set()
        live: list[int] = []
        pending = starts[::-1]  # explore in order; duplicates are skipped by ``seen``
        while pending:
            pc = pending.pop()
            if pc in seen:
                continue
            seen.add(pc)
            op = ops[pc]
            if op == _CHAR:
                live.append(pc)
            elif op == _MATCH:
                return live, True
            elif op == _ASSERT:
                if tests[pc](text, position) is not None:
                    pending.append(pc + 1)
            else:
                pending.extend(reversed(targets[pc]))
        return live, False


class _Builder:
    """Compiles a parsed tree into a ``_Program``; leaves are compiled by ``re`` itself."""

    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.ops: list[int] = []
        self.targets: list[tuple[int, ...]] = []
        self.tests: list[Callable[..., Any]] = []

    def program(self, nodes: list[Node]) -> _Program:
        try:
            self._sequence(nodes, self.flags)
        except RecursionError:
            raise UnsupportedPatternError("groups nest too deeply") from None
        self._emit(_MATCH)
        return _Program(tuple(self.ops), tuple(self.targets), tuple(self.tests))

    def _emit(
        self, op: int, targets: tuple[int, ...] = (), test: Callable[..., Any] | None = None
    ) -> int:
        if len(self.ops) >= MAX_PROGRAM:
            raise UnsupportedPatternError(
                f"is too large: it expands to more than {MAX_PROGRAM} matching steps"
            )
        self.ops.append(op)
        self.targets.append(targets)
        self.tests.append(test or _no_test)
        return len(self.ops) - 1

    def _patch(self, pc: int, targets: tuple[int, ...]) -> None:
        self.targets[pc] = targets

    def _sequence(self, nodes: list[Node], flags: int) -> None:
        for node in nodes:
            self._node(node, flags)

    def _node(self, node: Node, flags: int) -> None:
        op, arg = node
        if op in _LEAVES:
            self._emit(_CHAR, test=_leaf(node, flags).fullmatch)
        elif op is sre.AT:
            self._emit(_ASSERT, test=_leaf(node, flags).match)
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


def _no_test(*_: object) -> None:
    """The test of an instruction that consumes nothing and asserts nothing."""


def _leaf(node: Node, flags: int) -> re.Pattern[str]:
    """``re``'s own matcher for one character test or anchor, under ``flags``."""
    state = _parser.State()
    state.flags = flags
    compiled: re.Pattern[str] = _compiler.compile(_parser.SubPattern(state, [node]), 0)
    return compiled
