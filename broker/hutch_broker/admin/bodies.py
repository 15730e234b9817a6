"""Request-body decoding and field checks, shared by every handler.

RabbitMQ's management API is lenient in known ways (an empty body or
``null`` is ``{}``, booleans may arrive as ``"true"``) and strict in others
(a missing required key is ``[{key_missing,type}]``).  Clients depend on both,
so the rules live here once.  Every function is pure and raises
``errors.ApiError`` (400), never a model error: handlers validate a whole
body before they change anything.

RabbitMQ's JSON parser refuses ``NaN``, ``Infinity`` and numbers beyond a
double (``1e400``) with ``not_json``; Python's accepts them, so they are
refused here the same way, and so is nesting deeper than ``MAX_DEPTH``
(every later walk over a body may then recurse safely) and a lone UTF-16
surrogate escape (``"\ud800"``), which no later UTF-8 encoding survives. A body must be
UTF-8 (RFC 8259), strictly: the bytes of a lone surrogate are refused too.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from hutch_broker.admin import errors
from hutch_broker.model import names

Body = dict[str, Any]
MAX_DEPTH: Final = names.MAX_DEPTH


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a double")
    return value


_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def _encodable(value: Any) -> bool:
    """True if every string (keys too) in ``value`` encodes as UTF-8."""
    pending = [value]
    while pending:
        current = pending.pop()
        if isinstance(current, str):
            try:
                current.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(current, dict):
            pending.extend(current)
            pending.extend(current.values())
        elif isinstance(current, list):
            pending.extend(current)
    return True


def _depth_within(value: Any, limit: int) -> bool:
    """True if no array or object in ``value`` is nested deeper than ``limit``."""
    pending = [(value, 1)]
    while pending:
        current, depth = pending.pop()
        if isinstance(current, dict):
            current = list(current.values())
        elif not isinstance(current, list):
            continue
        if depth > limit:
            return False
        pending.extend((item, depth + 1) for item in current if isinstance(item, dict | list))
    return True


def parse_json(raw: bytes) -> Body:
    """The body as a JSON object; ``""``, ``null`` and ``undefined`` mean ``{}``."""
    text = raw.strip()
    if text in (b"", b"null", b"undefined"):
        return {}
    try:
        # Decoded here, strictly: json.loads(bytes) decodes with "surrogatepass", which turns
        # the CESU-8 bytes of a lone surrogate (ED A0 80) into "\ud800" without a word.
        value = json.loads(text.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise errors.bad_request("not_json") from None
    if not _depth_within(value, MAX_DEPTH):
        raise errors.bad_request("not_json")
    if _SURROGATE_ESCAPE.search(text) and not _encodable(value):  # valid pairs pass
        raise errors.bad_request("not_json")
    if isinstance(value, dict):
        return value
    if isinstance(value, bool):
        return {}
    if isinstance(value, str):
        raise errors.bad_request(
            "invalid payload: the request body JSON-decoded to a string. "
            "Is the input doubly-JSON-encoded?"
        )
    raise errors.bad_request("not_json")


def name(kind: str, value: str) -> str:
    """A name or key that must fit an AMQP shortstr (model/names.py), else RabbitMQ's 400."""
    try:
        return names.check(kind, value)
    except names.InvalidNameError as exc:
        raise errors.bad_request(f"{exc}\n") from None


def name_table(kind: str, table: dict[str, Any]) -> dict[str, Any]:
    """An arguments or headers table whose keys all fit a shortstr."""
    try:
        names.check_table(kind, table)
    except names.InvalidNameError as exc:
        raise errors.bad_request(f"{exc}\n") from None
    return table


def missing(key: str) -> errors.ApiError:
    return errors.bad_request(f"[{{key_missing,{key}}}]")


def _shown(value: Any) -> str:
    return json.dumps(value)


def required(body: Body, key: str) -> Any:
    value = body.get(key)
    if value is None:
        raise missing(key)
    return value


def boolean(body: Body, key: str, default: bool) -> bool:
    """A boolean, also accepted as the strings ``"true"``/``"false"``."""
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    raise errors.bad_request(f"{key} must be a boolean, got {_shown(value)}")


def string(body: Body, key: str, default: str | None = None) -> str:
    value = body.get(key, default)
    if value is None:
        raise missing(key)
    if not isinstance(value, str):
        raise errors.bad_request(f"{key} must be a string, got {_shown(value)}")
    return value


def table(body: Body, key: str) -> dict[str, Any]:
    """An arguments-like object; absent or null is ``{}``."""
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise errors.bad_request(f"{key} must be an object, got {_shown(value)}")
    return value


# Arguments and policy keys whose values become exchange names or routing keys of deliveries.
NAME_VALUED: Final = {
    "alternate-exchange": "exchange",
    "x-dead-letter-exchange": "exchange",
    "x-dead-letter-routing-key": "routing_key",
    "dead-letter-exchange": "exchange",
    "dead-letter-routing-key": "routing_key",
}


def named_values(table: dict[str, Any]) -> dict[str, Any]:
    """Checks the string values of ``NAME_VALUED`` keys (a DLX, its routing key, an AE)."""
    for key, kind in NAME_VALUED.items():
        value = table.get(key)
        if isinstance(value, str):
            name(kind, value)
    return table


def arguments(body: Body, key: str = "arguments") -> dict[str, Any]:
    """An ``arguments`` object of a queue, exchange or binding, checked as AMQP would."""
    return named_values(name_table(key, table(body, key)))


def integer(body: Body, key: str, *, minimum: int) -> int:
    value = required(body, key)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise errors.bad_request(f"{key} must be an integer >= {minimum}, got {_shown(value)}")
    return value


def tags(value: Any) -> list[str]:
    """User and vhost tags: ``"a,b"`` or ``["a", "b"]``."""
    if value is None:
        return []
    if isinstance(value, str):
        return [tag.strip() for tag in value.split(",") if tag.strip()]
    if isinstance(value, list) and all(isinstance(tag, str) for tag in value):
        return [tag for tag in value if tag]
    raise errors.bad_request(f"tags must be a string or a list of strings, got {_shown(value)}")


def query_flag(value: str | None) -> bool:
    """``?if-unused=true`` style flags."""
    return value is not None and value.lower() == "true"
