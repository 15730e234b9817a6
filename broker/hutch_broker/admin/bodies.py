"""Request-body decoding and field checks, shared by every handler.

RabbitMQ's management API is lenient in known ways (an empty body or
``null`` is ``{}``, booleans may arrive as ``"true"``) and strict in others
(a missing required key is ``[{key_missing,type}]``).  Clients depend on both,
so the rules live here once.  Every function is pure and raises
``errors.ApiError`` (400), never a model error: handlers validate a whole
body before they change anything.
"""

from __future__ import annotations

import json
from typing import Any

from hutch_broker.admin import errors

Body = dict[str, Any]


def parse_json(raw: bytes) -> Body:
    """The body as a JSON object; ``""``, ``null`` and ``undefined`` mean ``{}``."""
    text = raw.strip()
    if text in (b"", b"null", b"undefined"):
        return {}
    try:
        value = json.loads(text)
    except (UnicodeDecodeError, ValueError):
        raise errors.bad_request("not_json") from None
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
