"""Which test modules judge by a measurement of the machine: what the serial pass must take.

Why: ``hutch_testing.serial`` lists the modules that run alone after the broker level's parallel
pass, because their verdict is a measurement that a second pytest worker would disturb. A list
kept by hand misses the next such module silently: it would pass in the parallel pass on a quiet
machine and fail by chance in CI. So the markers of a measurement are read from each module's
code (its syntax tree: comments and docstrings say nothing here), and ``tests/levels`` fails on a
module that has one and is not listed:

- ``canary``: a canary (``hutch_testing.noisy``'s ``Canary`` or ``CanaryBound``, the noisy cases,
  or a canary of the module's own: a name with "canary" in it) times round trips against a bound;
- ``cpu``: CPU seconds or scheduler statistics are read (``cpu_seconds``, ``process_time``,
  ``getrusage``, ``thread_time``, ``/proc/.../schedstat``);
- ``rss``: a process's resident memory is read (``rss_bytes``, ``peak_rss_bytes``,
  ``VmRSS``/``VmHWM``);
- ``clock``: an assertion compares a clock difference (``time.perf_counter()``,
  ``time.monotonic()`` or ``time.time()`` minus an earlier reading, or anything computed from
  one, such as a rate or the slowest of a list of them) with a bound. A deadline
  (``time.monotonic() + 60``, then ``while time.monotonic() < deadline``), a timeout asserted
  in a wait's loop and a lower bound on a duration are not markers: a slower machine only
  waits longer, or passes them more easily.

Pure: it reads source text and returns names; it imports nothing it scans.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

CANARY, CPU, RSS, CLOCK = "canary", "cpu", "rss", "clock"
CANARY_MODULES = frozenset({"hutch_testing.noisy", "hutch_testing.noisy_cases"})
CPU_NAMES = frozenset({"cpu_seconds", "process_time", "getrusage", "thread_time"})
RSS_NAMES = frozenset({"rss_bytes", "peak_rss_bytes", "reset_peak_rss"})
RSS_TEXT = ("VmRSS", "VmHWM")
CLOCKS = frozenset({"perf_counter", "monotonic", "time", "perf_counter_ns", "monotonic_ns"})
# A module without any of these words in its text has no marker (a cheap first look).
_WORDS = (
    "canary",
    "Canary",
    "noisy",
    "schedstat",
    "perf_counter",
    "monotonic",
    "time()",
    *CPU_NAMES,
    *RSS_NAMES,
    *RSS_TEXT,
)


def markers(source: str) -> set[str]:
    """The markers of a measurement in a module's source (empty for a module without)."""
    if not any(word in source for word in _WORDS):
        return set()  # most modules: no need to parse them
    nodes = list(ast.walk(ast.parse(source)))
    found: set[str] = set()
    for node in nodes:
        found |= _node_markers(node)
    if _asserts_on_clock(nodes):
        found.add(CLOCK)
    return found


def scan(root: Path, folder: str = "tests") -> dict[str, set[str]]:
    """Every test module under ``root/folder`` that has a marker, by path relative to ``root``."""
    found = {}
    for path in sorted((root / folder).rglob("test_*.py")):
        marks = markers(path.read_text())
        if marks:
            found[path.relative_to(root).as_posix()] = marks
    return found


def _node_markers(node: ast.AST) -> set[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {CANARY} if _imports(node) & CANARY_MODULES else set()
    name = _name_of(node)
    if name is not None:
        if "canary" in name.lower():
            return {CANARY}
        if name in CPU_NAMES:
            return {CPU}
        if name in RSS_NAMES:
            return {RSS}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if "schedstat" in node.value:
            return {CPU}
        if any(text in node.value for text in RSS_TEXT):
            return {RSS}
    return set()


def _imports(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    module = node.module or ""
    return {module} | {f"{module}.{alias.name}" for alias in node.names}


def _name_of(node: ast.AST) -> str | None:
    """The identifier a node introduces or reads (not string contents)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.arg):
        return node.arg
    return None


def _asserts_on_clock(nodes: list[ast.AST]) -> bool:
    """Whether an ``assert`` compares something computed from a clock difference, other than
    a duration held to a lower bound ("not closed before 5 s"), which a neighbour that slows
    the test can only satisfy more, and the timeout of a wait (an ``assert`` right in the body
    of a ``while`` loop, as ``assert time.monotonic() < deadline`` is)."""
    timed = _timed_names(nodes)
    durations = _duration_names(nodes)
    waits = {id(stmt) for node in nodes if isinstance(node, ast.While) for stmt in node.body}
    for node in nodes:
        if isinstance(node, ast.Assert) and id(node) not in waits:
            for compare in ast.walk(node.test):
                if (
                    isinstance(compare, ast.Compare)
                    and _is_timed(compare, timed)
                    and not _is_lower_bound(compare, durations)
                ):
                    return True
    return False


def _is_lower_bound(compare: ast.Compare, durations: set[str]) -> bool:
    """``duration >= bound`` or ``bound <= duration``, the duration a clock difference itself
    or a name that holds one."""
    if len(compare.ops) != 1:
        return False
    left, op, right = compare.left, compare.ops[0], compare.comparators[0]
    if isinstance(op, (ast.Gt, ast.GtE)):
        return _is_duration(left, durations) and not _is_timed(right, durations)
    if isinstance(op, (ast.Lt, ast.LtE)):
        return _is_duration(right, durations) and not _is_timed(left, durations)
    return False


def _is_duration(node: ast.AST, durations: set[str]) -> bool:
    return _is_clock_difference(node) or _name_of(node) in durations


def _duration_names(nodes: list[ast.AST]) -> set[str]:
    """Names assigned a clock difference itself (``took = clock() - began``)."""
    return {
        name
        for node in nodes
        if isinstance(node, ast.Assign) and _is_clock_difference(node.value)
        for target in node.targets
        for name in _target_names(target)
    }


def _timed_names(nodes: list[ast.AST]) -> set[str]:
    """Names (variables and attributes) that hold a clock difference or something computed
    from one, to a fixed point: ``took = clock() - began``, ``rate = n / took``,
    ``trips.append(clock() - began)``, ``slowest = max(slowest, clock() - began)``."""
    if not any(_is_clock_difference(node) for node in nodes):
        return set()  # nothing to follow: most modules
    flows = [(targets, _names(value)) for node in nodes for targets, value in _assignments(node)]
    timed = {
        name
        for node in nodes
        for targets, value in _assignments(node)
        if any(_is_clock_difference(part) for part in ast.walk(value))
        for name in targets
    }
    while True:
        more = {name for targets, read in flows if read & timed for name in targets} - timed
        if not more:
            return timed
        timed |= more


def _assignments(node: ast.AST) -> Iterable[tuple[set[str], ast.AST]]:
    if isinstance(node, ast.Assign):
        yield {name for target in node.targets for name in _target_names(target)}, node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
        yield set(_target_names(node.target)), node.value
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("append", "extend", "add")
    ):
        for argument in node.args:
            yield set(_target_names(node.func.value)), argument


def _target_names(target: ast.AST) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute):
        yield target.attr
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _target_names(element)


def _is_timed(node: ast.AST, timed: set[str]) -> bool:
    """Whether an expression reads a timed name or takes a clock difference itself."""
    return bool(_names(node) & timed) or any(_is_clock_difference(part) for part in ast.walk(node))


def _is_clock_difference(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and _is_clock(node.left)


def _names(node: ast.AST) -> set[str]:
    names = (_name_of(child) for child in ast.walk(node))
    return {name for name in names if name is not None}


def _is_clock(node: ast.AST) -> bool:
    """``time.perf_counter()`` and its kind (also ``loop.time()``)."""
    if not isinstance(node, ast.Call) or node.args:
        return False
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr in CLOCKS) or (
        isinstance(func, ast.Name) and func.id in CLOCKS - {"time"}
    )
