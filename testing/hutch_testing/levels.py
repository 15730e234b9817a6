"""Test levels: which level a collected test is at, and the guard that keeps the fast level fast.

Why: a test's cost follows from what it starts, and that is known from its fixtures before it
runs. So the level is derived, never remembered: the plugin (``hutch_testing.pytest_plugin``)
marks every collected test with exactly one of these, cheapest first:

- ``fast``: pure and in memory; no process started, no socket on the network stack (AF_UNIX
  pairs, such as an event loop's self-pipe, are fine);
- ``broker``: processes and sockets on this machine, no Kubernetes: hutch-broker processes,
  RabbitMQ 3.10.8 side by side, in-process servers on loopback, Spark in local mode, helm;
- ``node``: a Kubernetes plane (the ``k8s`` marker: the apiserver, workloads or node tier);
- ``e2e``: the whole chain (``e2e/``, marker ``e2e``).

A test that starts a process or opens a socket while its fixtures say ``fast`` fails, naming
what it did and how to place it, so a slow test can never hide in ``make fast``. The guard
swaps a few attributes around each phase of a fast test (``Guard``): the cost is measured in
docs/testing.md.

``-m fast`` leaves uncollected the modules whose ``pytestmark`` alone puts them above (see
``skippable``): to select by marker pytest imports every module of tests/ and rewrites its asserts
first, most of the fast level's collection in a fresh clone (no bytecode yet, as in CI). Fixtures
only ever raise a level (``level_of``), so a module whose own ``pytestmark`` names a level's marker
(``broker``, ``rabbitmq``, ``spark``, ``k8s``, ...) holds no fast test whatever it holds, and its
source text tells. Modules placed by their fixtures are still imported: only their import tells.
The broker and node levels import every module, so a skipped one is still collected there.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

LEVELS = ("fast", "broker", "node", "e2e")
FAST, BROKER, NODE, E2E = LEVELS

# Markers that already say a test starts processes: Spark's JVM, RabbitMQ, long crash loops.
BROKER_MARKERS = frozenset({"rabbitmq", "spark", "slow"})
LEVEL_ATTRIBUTE = "hutch_level"
HELP = "docs/testing.md#test-levels"
_NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_INHERITED = object()
F = TypeVar("F", bound=Callable[..., Any])


def broker_level(fixture_function: F) -> F:
    """Says that a fixture starts a process or opens a socket: its users are at level broker.

    Put it under ``@pytest.fixture``, on the function itself.
    """
    setattr(fixture_function, LEVEL_ATTRIBUTE, BROKER)
    return fixture_function


def declared_level(fixture_function: Any) -> str | None:
    """The level a fixture function declares (through wrappers such as pytest-asyncio's)."""
    while fixture_function is not None:
        level = getattr(fixture_function, LEVEL_ATTRIBUTE, None)
        if level is not None:
            return str(level)
        fixture_function = getattr(fixture_function, "__wrapped__", None)
    return None


def level_of(markers: Iterable[str], fixture_levels: Iterable[str | None] = ()) -> str:
    """The level of a test from its markers' names and the levels its fixtures declare (pure)."""
    marks, declared = set(markers), set(fixture_levels)
    if E2E in marks:
        return E2E
    if "k8s" in marks or NODE in marks or NODE in declared:
        return NODE
    if BROKER in marks or marks & BROKER_MARKERS or BROKER in declared:
        return BROKER
    return FAST


def advice() -> str:
    """How to move a test off the fast level: the sentence every guard failure ends with."""
    return (
        "A test that starts a process or opens a socket is at level broker (node with a "
        "Kubernetes plane): use a fixture that puts it there (hutch_broker, rabbitmq, ...), "
        "decorate the fixture that does it with @hutch_testing.levels.broker_level, or mark "
        f"the module `pytestmark = pytest.mark.broker` ({HELP})."
    )


class LevelError(RuntimeError):
    """Raised inside a fast test at the call that would start a process or open a socket."""


@dataclass
class Guard:
    """Blocks process starts and network sockets while active; remembers the first attempt.

    The first attempt is kept because the code under test may catch the error (a client's
    retry loop): the plugin fails the test with it even then.
    """

    attempts: list[str] = field(default_factory=list)
    _saved: list[tuple[Any, str, Any]] = field(default_factory=list)

    def blocked(self, what: str) -> LevelError:
        self.attempts.append(what)
        return LevelError(f"a fast-level test {what}")

    @contextmanager
    def active(self) -> Iterator[Guard]:
        """Swaps the attributes in for the block, and back whatever happens."""
        self._swap(subprocess.Popen, "__init__", self._popen())
        for name in ("fork", "posix_spawn", "posix_spawnp", "system"):
            if hasattr(os, name):
                self._swap(os, name, self._process(name))
        for name in ("connect", "connect_ex", "bind"):
            self._swap(socket.socket, name, self._network(name, getattr(socket.socket, name)))
        try:
            yield self
        finally:
            while self._saved:
                owner, name, original = self._saved.pop()
                if original is _INHERITED:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)

    def _swap(self, owner: Any, name: str, replacement: Any) -> None:
        """``socket.socket`` inherits ``connect`` from ``_socket.socket``: such a name is deleted
        again afterwards rather than copied into the subclass."""
        self._saved.append((owner, name, vars(owner).get(name, _INHERITED)))
        setattr(owner, name, replacement)

    def _popen(self) -> Callable[..., None]:
        def blocked(_popen: Any, *args: Any, **kwargs: Any) -> None:
            command = args[0] if args else kwargs.get("args")
            raise self.blocked(f"started a process: {_command(command)}")

        return blocked

    def _process(self, name: str) -> Callable[..., Any]:
        def blocked(*args: Any, **_kwargs: Any) -> Any:
            detail = f": {_command(args[0])}" if args else ""
            raise self.blocked(f"started a process (os.{name}{detail})")

        return blocked

    def _network(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def checked(sock: socket.socket, address: Any, *args: Any) -> Any:
            if sock.family in _NETWORK_FAMILIES:
                verb = "bound a socket to" if name == "bind" else "opened a connection to"
                raise self.blocked(f"{verb} {_address(address)}")
            return original(sock, address, *args)

        return checked


def _command(args: Any) -> str:
    if isinstance(args, (str, bytes, os.PathLike)):
        return os.fsdecode(args)
    try:
        return " ".join(os.fsdecode(part) for part in args)
    except TypeError:
        return repr(args)


def _address(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return repr(address)


_ASSIGNED = re.compile(r"^pytestmark\b", re.MULTILINE)
_NAME = "pytestmark"


def marker_names(source: str) -> frozenset[str]:
    """The names of the markers the module's top-level ``pytestmark`` applies (its last
    assignment), or none. A module that does not parse applies none: its import will tell."""
    if _ASSIGNED.search(source) is None:  # the cheap test first: most modules have none
        return frozenset()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    value: ast.expr | None = None
    for statement in tree.body:
        if _assigns_pytestmark(_targets(statement)):
            value = getattr(statement, "value", None)
    if value is None:
        return frozenset()
    return frozenset(
        node.attr
        for node in ast.walk(value)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    )


def _targets(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.Assign):
        return statement.targets
    if isinstance(statement, ast.AnnAssign):
        return [statement.target]
    return []


def _assigns_pytestmark(targets: Iterable[ast.expr]) -> bool:
    return any(isinstance(target, ast.Name) and target.id == _NAME for target in targets)


def above_fast(path: Path) -> bool:
    """True when the test module at ``path`` holds no fast test by its ``pytestmark`` alone."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return level_of(marker_names(source)) != FAST


def skippable(path: Path, markexpr: str) -> bool:
    """Whether a run selecting ``markexpr`` may leave the module at ``path`` uncollected: only
    for exactly ``-m fast``, only test modules, only those :func:`above_fast` says."""
    is_test_module = path.suffix == ".py" and path.name.startswith("test_")
    return markexpr.strip() == FAST and is_test_module and above_fast(path)
