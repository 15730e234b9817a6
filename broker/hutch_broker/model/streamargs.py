"""Stream queues' declare and consume rules, and the ``x-stream-offset`` spec: pure checks.

Why a module of its own: a stream is another queue type with its own refusals, and RabbitMQ's
texts for them are part of the contract (clients match on them), so they are written here once,
exactly as RabbitMQ 3.10.8 answers them (observed side by side, tests/sidebyside/
test_streams.py), and tested without a broker:

- a stream is durable, shared and named by its client: auto-delete, exclusive and non-durable
  declares are refused in that order, as for a quorum queue, and so is a server-named one;
- the arguments of other queue types are refused (``REFUSED_ARGUMENTS``, after the values of
  its own, as 3.10.8 orders them), its own are checked (``x-max-age`` is a string such as
  ``7D``; a malformed one makes 3.10.8 fail with 541 ``INTERNAL_ERROR`` and close the
  connection, which Hutch answers the same way);
- a consumer needs a per-consumer prefetch (``basic.qos``, not global), acknowledges what it
  gets (no ``no_ack``), has no ``x-priority``; ``basic.get``, ``queue.purge``, ``basic.nack``
  and ``basic.reject`` close the connection with 540.

``parse_offset`` turns ``x-stream-offset`` into an ``OffsetSpec`` the stream resolves against
its segment index (``model.streamindex``).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from hutch_broker.protocol import errors
from hutch_broker.protocol.strings import text

QUEUE_TYPE: Final = "stream"
TYPE_MODULE: Final = "rabbit_stream_queue"  # how RabbitMQ names the type in its error texts
OFFSET_HEADER: Final = "x-stream-offset"
# Declare arguments of other queue types (3.10.8, observed: each refused with this text).
REFUSED_ARGUMENTS: Final = (
    "x-max-length",
    "x-max-priority",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-overflow",
    "x-expires",
    "x-single-active-consumer",
    "x-queue-mode",
    "x-queue-version",
    "x-delivery-limit",
    "x-dead-letter-strategy",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-quorum-initial-group-size",
    "x-queue-master-locator",
)
_NON_NEGATIVE: Final = ("x-max-length-bytes", "x-stream-max-segment-size-bytes")
# RabbitMQ's units for x-max-age (rabbit_amqqueue:check_max_age): years, months, days, hours,
# minutes, seconds; a year is 365 days and a month 30, as there.
_AGE_UNITS_S: Final = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}
_AGE: Final = re.compile(r"([0-9]+)([YMDhms])")
INTERNAL_ERROR_TEXT: Final = "INTERNAL_ERROR"


def is_stream(arguments: dict[str, Any]) -> bool:
    value = arguments.get("x-queue-type")
    return isinstance(value, str | bytes) and text(value) == QUEUE_TYPE


def internal_error() -> errors.HardError:
    """What 3.10.8 answers where its stream code crashes on a bad value: 541, no detail."""
    return errors.HardError(541, INTERNAL_ERROR_TEXT, 0, 0)


def parse_age(value: Any) -> int | None:
    """Milliseconds of an ``x-max-age``/interval string such as ``7D`` or ``90m``; None if it is
    not one (empty, no unit, an unknown unit, trailing text)."""
    if not isinstance(value, str | bytes):
        return None
    spec = text(value)
    match = _AGE.fullmatch(spec)
    if match is None:
        return None
    return int(match.group(1)) * _AGE_UNITS_S[match.group(2)] * 1000


def _invalid(arg: str, queue: str, vhost: str, detail: str) -> errors.AMQPError:
    return errors.precondition_failed(
        f"invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {detail}"
    )


def check_arguments(
    queue: str, vhost: str, arguments: dict[str, Any], type_name: Callable[[Any], str]
) -> None:
    """The stream-only argument checks, after the common ones (``model.arguments``, which
    passes its ``type_name``: RabbitMQ's names of field-table types).

    As 3.10.8 does: the values of the stream's own arguments first, then the first argument of
    another queue type in the client's order, whatever its value (``x-message-ttl: "abc"`` and
    an ``x-dead-letter-routing-key`` without an exchange are refused as another type's)."""
    for arg in _NON_NEGATIVE:
        if arg not in arguments:
            continue
        value = arguments[arg]
        if isinstance(value, bool) or not isinstance(value, int):
            name = type_name(value)
            raise _invalid(arg, queue, vhost, f'"expected integer, got {name}"')
        if value < 0:
            raise _invalid(arg, queue, vhost, f"{{value_negative,{value}}}")
    if "x-max-age" in arguments:
        age = arguments["x-max-age"]
        if not isinstance(age, str | bytes):
            raise _invalid("x-max-age", queue, vhost, f"{{unacceptable_type,{type_name(age)}}}")
        millis = parse_age(age)
        if millis is None:
            raise internal_error()  # 3.10.8 crashes on it (observed: 541, connection closed)
        if millis == 0:
            raise _invalid("x-max-age", queue, vhost, "invalid_max_age")
    foreign = next((arg for arg in arguments if arg in REFUSED_ARGUMENTS), None)
    if foreign is not None:
        raise errors.precondition_failed(
            f"invalid arg '{foreign}' for queue '{queue}' in vhost '{vhost}' "
            f"of queue type {TYPE_MODULE}"
        )


def check_consume(
    queue: str, vhost: str, *, prefetch: int, no_ack: bool, arguments: dict[str, Any]
) -> OffsetSpec:
    """basic.consume on a stream: its refusals in 3.10.8's order; the offset to start from."""
    if no_ack:
        raise errors.not_implemented(
            f"automatic acknowledgement not supported by stream queues queue '{queue}' in "
            f"vhost '{vhost}'"
        )
    if prefetch <= 0:
        raise errors.precondition_failed(
            f"consumer prefetch count is not set for 'queue '{queue}' in vhost '{vhost}''"
        )
    if "x-priority" in arguments:
        raise errors.precondition_failed(
            f"invalid arg 'x-priority' for queue '{queue}' in vhost '{vhost}' "
            f"of queue type {TYPE_MODULE}"
        )
    return parse_offset(arguments.get(OFFSET_HEADER, "next"))


def unsupported(what: str, queue: str, vhost: str) -> errors.HardError:
    """540 for what a stream does not do (basic.get, queue.purge, basic.nack/reject)."""
    return errors.not_implemented(
        f"{what} not supported by stream queues queue '{queue}' in vhost '{vhost}'"
    )


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a consumer starts: ``kind`` is first, last, next, offset or timestamp.

    ``value`` is the offset for ``offset`` and epoch milliseconds for ``timestamp``; an
    interval such as ``1h`` is a timestamp relative to now (``since_ms``)."""

    kind: str
    value: int = 0
    since_ms: int | None = None  # an interval: the timestamp is now minus this

    def timestamp(self, now_ms: int) -> int:
        return now_ms - self.since_ms if self.since_ms is not None else self.value


def parse_offset(value: Any) -> OffsetSpec:
    """``x-stream-offset`` as 3.10.8 takes it: ``first``/``last``/``next`` (lower case), an
    integer (a negative one means the first), an AMQP timestamp, or an interval string.
    Anything else makes 3.10.8 crash (541, observed), so it raises ``internal_error``."""
    if isinstance(value, bool):
        raise internal_error()
    if isinstance(value, int):
        return OffsetSpec("offset", max(value, 0))
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return OffsetSpec("timestamp", int(moment.timestamp() * 1000))
    if isinstance(value, str | bytes):
        spec = text(value)
        if spec in ("first", "last", "next"):
            return OffsetSpec(spec)
        millis = parse_age(spec)
        if millis is not None:
            return OffsetSpec("timestamp", since_ms=millis)
    raise internal_error()
