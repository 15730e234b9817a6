"""What a verb asks of the management API, as data: requests, and how to read their answers.

Why: translating a command line into HTTP is the part worth testing exhaustively, and it needs no
broker. A ``Plan`` is the whole translation: the banner rabbitmqctl prints first, the requests in
order (a vhost or user check first where rabbitmqctl reports those with their own exit code), what
a given status means for this verb, and a pure ``render`` from the answers' bodies to the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # from /api/..., every name already percent-quoted
    body: Any = None  # JSON-encoded when not None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Fail:
    """The command fails with this exit code and one line of explanation."""

    code: int
    message: str


@dataclass(frozen=True)
class Substitute:
    """The status counts as success, with this body (e.g. a missing vhost lists nothing)."""

    body: Any = None


Reading = Fail | Substitute


@dataclass(frozen=True)
class Step:
    """One request; a callable builds it from the earlier steps' bodies (keep a user's tags)."""

    request: Request | Callable[[list[Any]], Request]
    on_status: Mapping[int, Reading] = field(default_factory=dict)

    def resolve(self, bodies: list[Any]) -> Request:
        return self.request if isinstance(self.request, Request) else self.request(bodies)


@dataclass(frozen=True)
class Table:
    """Rows under named columns; ``kinds`` says how a column's values print (formatting)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Text:
    """Payload lines printed even with --quiet (export to stdout, a limits object, status)."""

    lines: tuple[str, ...]


@dataclass(frozen=True)
class Done:
    """Success with nothing to print but, unless --quiet, these informational lines."""

    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class WriteFile:
    """Success once ``text`` is written to ``path`` (export_definitions to a file)."""

    path: str
    text: str


Result = Table | Text | Done | WriteFile


def nothing(_bodies: list[Any]) -> Result:
    return Done()


@dataclass(frozen=True)
class Plan:
    banner: tuple[str, ...]
    steps: tuple[Step, ...]
    render: Callable[[list[Any]], Result | Fail] = nothing
    wait_seconds: float | None = None  # await_startup: retry until the broker answers
