"""Value conventions every view shares: JSON-safe field tables, rates, timestamps.

RabbitMQ reports each counter twice (``publish`` and ``publish_details``
with a rate).  Hutch's statistics are immediate counters without history,
so rates are always 0.0; the ``_details`` objects are still sent because
clients index into them.
"""

from __future__ import annotations

import base64
import datetime
import decimal
from collections.abc import Iterable, Mapping
from typing import Any, Final

MESSAGE_STATS: Final = (
    "ack",
    "confirm",
    "deliver",
    "deliver_get",
    "deliver_no_ack",
    "disk_reads",
    "disk_writes",
    "drop_unroutable",
    "get",
    "get_empty",
    "get_no_ack",
    "publish",
    "redeliver",
    "return_unroutable",
)


def jsonable(value: Any) -> Any:
    """An AMQP field value (bytes, Decimal, datetime, nested tables) as a JSON value."""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp())
    return value


def details() -> dict[str, float]:
    return {"rate": 0.0}


def with_details(counters: Mapping[str, int]) -> dict[str, Any]:
    """``{"publish": 3}`` -> ``{"publish": 3, "publish_details": {"rate": 0.0}}``."""
    result: dict[str, Any] = {}
    for name, value in counters.items():
        result[name] = value
        result[f"{name}_details"] = details()
    return result


def activity(counters: Mapping[str, int]) -> dict[str, Any]:
    """A per-object ``message_stats``: absent (empty) until something happened, as in RabbitMQ."""
    return with_details(counters) if any(counters.values()) else {}


def message_stats(**counters: int) -> dict[str, Any]:
    """RabbitMQ's full ``message_stats`` object; counters Hutch does not keep are 0."""
    values = dict.fromkeys(MESSAGE_STATS, 0)
    values.update(counters)
    return with_details(values)


def zero_counters(names: Iterable[str]) -> dict[str, Any]:
    return with_details(dict.fromkeys(names, 0))


def iso_time(epoch_ms: int) -> str:
    """RabbitMQ's ``idle_since`` form: ``2026-11-22T10:12:49.163+00:00``."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


def node_state(node: str) -> dict[str, str]:
    return {node: "running"}
