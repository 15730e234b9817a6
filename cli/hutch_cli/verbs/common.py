"""What every verb module shares: the verb's table entry, its context, and the usual checks.

Why: rabbitmqctl reports a missing vhost or user with its own exit code and message, which differ
from verb to verb (65 "Virtual host 'v' does not exist" for policies, 69 "Virtual host v does not
exist" for permissions, 67 for users). Each verb says which check it makes with one call here, so
the table of codes reads next to the verb, and the HTTP details stay in one place.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hutch_cli import exitcodes, plans
from hutch_cli.arguments import Invocation


@dataclass(frozen=True)
class Context:
    """The parsed command line and the two inputs a verb may need beyond it (injected)."""

    invocation: Invocation
    read_file: Callable[[str], str]  # "-" is stdin; raises OSError
    read_password: Callable[[], str | None]  # a line from stdin when it is not a terminal

    @property
    def vhost(self) -> str:
        return self.invocation.value("vhost", "/") or "/"


Builder = Callable[[Context, tuple[str, ...]], "plans.Plan | plans.Fail"]


@dataclass(frozen=True)
class Verb:
    name: str
    usage: str  # what follows the verb name in the usage line
    build: Builder
    required: int  # positional arguments that must be given
    optional: int = 0  # more that may be given; -1: any number (column names, tags)
    options: frozenset[str] = frozenset()  # verb options beyond the global ones


def quote(name: str) -> str:
    """One path segment of the management API (``/`` is ``%2F``)."""
    return urllib.parse.quote(name, safe="")


def compact(value: Any) -> str:
    """JSON as rabbitmqctl prints definitions and values: no spaces."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def decode_json(text: str) -> Any | plans.Fail:
    """A JSON argument, or rabbitmqctl's failure for it (exit 69, before anything is sent)."""
    try:
        return json.loads(text)
    except ValueError:
        return plans.Fail(exitcodes.UNAVAILABLE, "JSON decoding error. Reason: badarg")


def failing(banner: tuple[str, ...], failure: plans.Fail) -> plans.Plan:
    """A plan that prints its banner, then fails without a request (as rabbitmqctl does)."""
    return plans.Plan(banner=banner, steps=(), render=lambda _bodies: failure)


def get(path: str, **on_status: plans.Reading) -> plans.Step:
    return plans.Step(plans.Request("GET", path), _statuses(on_status))


def put(path: str, body: Any, **on_status: plans.Reading) -> plans.Step:
    return plans.Step(plans.Request("PUT", path, body), _statuses(on_status))


def delete(path: str, **on_status: plans.Reading) -> plans.Step:
    return plans.Step(plans.Request("DELETE", path), _statuses(on_status))


def _statuses(on_status: dict[str, plans.Reading]) -> dict[int, plans.Reading]:
    # keyword names are s404 and the like, so call sites read get(path, s404=...)
    return {int(key.removeprefix("s")): reading for key, reading in on_status.items()}


def vhost_exists(vhost: str, *, code: int = exitcodes.DATA_ERROR) -> plans.Step:
    """Fail when the vhost is missing: 65 with quotes, or 69 without (permission verbs)."""
    if code == exitcodes.DATA_ERROR:
        message = f"Virtual host '{vhost}' does not exist"
    else:
        message = f"Virtual host {vhost} does not exist"
    return get(f"/api/vhosts/{quote(vhost)}", s404=plans.Fail(code, message))


def user_exists(user: str, *, quoted: bool = True) -> plans.Step:
    """Fail with 67 when the user is missing (rabbitmqctl quotes the name for user verbs)."""
    shown = f'"{user}"' if quoted else user
    return get(
        f"/api/users/{quote(user)}",
        s404=plans.Fail(exitcodes.NO_USER, f"User {shown} does not exist"),
    )


def rows(items: Any, fields: tuple[str, ...]) -> tuple[tuple[Any, ...], ...]:
    """The given fields of each item of a JSON list (missing fields are None)."""
    listed = items if isinstance(items, list) else []
    return tuple(tuple(item.get(name) for name in fields) for item in listed)


PARAMETER_MISSING = plans.Fail(exitcodes.UNAVAILABLE, "Parameter does not exist")
