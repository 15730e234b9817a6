"""Queue and exchange argument validation and redeclare equivalence (Q-2, Q-3, EX-3).

RabbitMQ's error texts are part of the contract (clients and tests match on
them), so the details here are written exactly as RabbitMQ 3.10.8 writes
them, Erlang terms included.  AMQP decoding loses an integer's wire width, so
the declared type name used in "of type 'signedint'" is derived from where
the value came from (``source``): AMQP clients send 32-bit ints as ``I``,
JSON numbers from the HTTP API are ``long``.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any, Final

from hutch_broker.model import names, quorum, streamargs
from hutch_broker.protocol import errors

OVERFLOW_MODES: Final = ("drop-head", "reject-publish", "reject-publish-dlx")
QUEUE_TYPES: Final = ("classic", quorum.QUEUE_TYPE, streamargs.QUEUE_TYPE)

# Arguments compared on redeclare; everything else is stored, not compared.
COMPARED_QUEUE_ARGUMENTS: Final = (
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-ring-size",
    "x-queue-type",
    "x-max-priority",
    "x-single-active-consumer",
)
# Compared too when the queue is a stream (3.10.8, observed); other types refuse them.
COMPARED_STREAM_ARGUMENTS: Final = ("x-max-age", "x-stream-max-segment-size-bytes")
# Arguments a Hutch extension may change on a live queue (PUT /api/queues/{vh}/{q}/arguments),
# with the same effects as a policy change (POL-7).
LIMIT_ARGUMENTS: Final = frozenset(
    {
        "x-max-length",
        "x-max-length-bytes",
        "x-overflow",
        "x-message-ttl",
        "x-expires",
        "x-ring-size",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
    }
)
_NON_NEGATIVE: Final = ("x-message-ttl", "x-max-length", "x-max-length-bytes")
_POSITIVE: Final = ("x-expires", "x-ring-size")
MAX_PRIORITY: Final = 255  # RabbitMQ's ?MAX_SUPPORTED_PRIORITY; 0 is accepted too
_EXPIRY: Final = ("x-message-ttl", "x-expires")
MAX_EXPIRY_MS: Final = 315_360_000_000  # RabbitMQ's ?MAX_EXPIRY_TIMER: ten years


def type_name(value: Any, source: str = "amqp") -> str:
    """RabbitMQ's name for a field-table value's type."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        if source == "http" or not -(2**31) <= value < 2**31:
            return "long"
        return "signedint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list | tuple):
        return "array"
    if value is None:
        return "void"
    return "longstr"


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _invalid(arg: str, queue: str, vhost: str, detail: str) -> errors.AMQPError:
    return errors.precondition_failed(
        f"invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {detail}"
    )


def _check_integer(arg: str, value: Any, queue: str, vhost: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(arg, queue, vhost, f'"expected integer, got {type_name(value)}"')
    if arg in _NON_NEGATIVE and value < 0:
        raise _invalid(arg, queue, vhost, f"{{value_negative,{value}}}")
    if arg in _POSITIVE and value < 1:
        kind = "value_zero" if value == 0 else "value_negative"
        raise _invalid(arg, queue, vhost, f"{{{kind},{value}}}")
    if arg in _EXPIRY and value > MAX_EXPIRY_MS:
        raise _invalid(arg, queue, vhost, f"{{value_too_large,{value}}}")


def _check_max_priority(queue: str, vhost: str, value: Any) -> None:
    """x-max-priority: an integer 0..255, with RabbitMQ 3.10.8's details (observed)."""
    arg = "x-max-priority"
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(arg, queue, vhost, f'"expected integer, got {type_name(value)}"')
    if value < 0:
        raise _invalid(arg, queue, vhost, f"{{value_negative,{value}}}")
    if value > MAX_PRIORITY:
        raise _invalid(arg, queue, vhost, f"{{max_value_exceeded,{value}}}")


def check_exchange_name_type(kind: str, name: str, vhost: str, arg: str, value: Any) -> None:
    """A DLX or AE name must be a longstr; RabbitMQ's channel checks this before the rest."""
    if value is not None and not isinstance(value, str | bytes):
        raise errors.precondition_failed(
            f"invalid type '{type_name(value)}' for arg '{arg}' in {kind} '{name}' in vhost "
            f"'{vhost}'"
        )


def check_dead_letter_exchange_type(queue: str, vhost: str, arguments: dict[str, Any]) -> None:
    dlx = arguments.get("x-dead-letter-exchange")
    check_exchange_name_type("queue", queue, vhost, "x-dead-letter-exchange", dlx)


def _refused_by_type(arguments: dict[str, Any]) -> frozenset[str]:
    """The arguments the declared queue type refuses (classic: none, as far as Hutch checks)."""
    if quorum.is_quorum(arguments):
        return frozenset(quorum.REFUSED_ARGUMENTS)
    if streamargs.is_stream(arguments):
        return frozenset(streamargs.REFUSED_ARGUMENTS)
    return frozenset()


def validate_queue_arguments(queue: str, vhost: str, arguments: dict[str, Any]) -> None:
    """Q-3: refuse a bad argument with RabbitMQ's 406 text; changes nothing.

    In RabbitMQ 3.10.8's order (observed side by side): the dead-letter exchange's type (its
    channel checks it first), the queue type, the values of the arguments the type takes, and
    only then an argument the type does not take ("of queue type ..."), the first in the
    client's order. So an argument a stream refuses is refused whatever its value (an
    ``x-dead-letter-routing-key`` without an exchange included).
    """
    check_dead_letter_exchange_type(queue, vhost, arguments)
    queue_type = arguments.get("x-queue-type")
    if queue_type is not None and format_value(queue_type) not in QUEUE_TYPES:
        detail = f"\"unsupported queue type '{format_value(queue_type)}'\""  # 3.10.8's quotes
        raise _invalid("x-queue-type", queue, vhost, detail)
    refused = _refused_by_type(arguments)
    supported = {key: value for key, value in arguments.items() if key not in refused}
    _check_common_values(queue, vhost, supported)
    if quorum.is_quorum(arguments):
        quorum.check_arguments(queue, vhost, arguments)
    if streamargs.is_stream(arguments):
        streamargs.check_arguments(queue, vhost, arguments, type_name)


def _check_common_values(queue: str, vhost: str, arguments: dict[str, Any]) -> None:
    """The value checks of the arguments every queue type may take."""
    for arg in (*_NON_NEGATIVE, *_POSITIVE):
        if arg in arguments:
            _check_integer(arg, arguments[arg], queue, vhost)
    if "x-max-priority" in arguments:
        _check_max_priority(queue, vhost, arguments["x-max-priority"])
    overflow = arguments.get("x-overflow")
    if overflow is not None and not isinstance(overflow, str | bytes):
        raise _invalid("x-overflow", queue, vhost, f"{{unacceptable_type,{type_name(overflow)}}}")
    if overflow is not None and format_value(overflow) not in OVERFLOW_MODES:
        raise _invalid("x-overflow", queue, vhost, "invalid_overflow")
    routing_key = arguments.get("x-dead-letter-routing-key")
    if routing_key is not None and not isinstance(routing_key, str | bytes):
        detail = f"{{unacceptable_type,{type_name(routing_key)}}}"
        raise _invalid("x-dead-letter-routing-key", queue, vhost, detail)
    for arg in ("x-dead-letter-exchange", "x-dead-letter-routing-key"):
        # Longstrs in AMQP, but a dead-lettered delivery carries them as shortstrs: one over
        # 255 bytes would make every dead-lettered message kill its consumers (541).
        size = _byte_length(arguments.get(arg))
        if size > names.MAX_BYTES:
            raise _invalid(arg, queue, vhost, f"{{too_long,{size}}}")
    if "x-dead-letter-routing-key" in arguments and "x-dead-letter-exchange" not in arguments:
        raise _invalid("x-dead-letter-routing-key", queue, vhost, "routing_key_but_no_dlx_defined")
    single_active = arguments.get("x-single-active-consumer")
    if single_active is not None and not isinstance(single_active, bool):
        detail = f"{{unacceptable_type,{type_name(single_active)}}}"
        raise _invalid("x-single-active-consumer", queue, vhost, detail)


def check_consumer_arguments(queue: str, vhost: str, arguments: dict[str, Any]) -> None:
    """basic.consume arguments: ``x-priority`` must be an integer (RabbitMQ 3.10.8's text)."""
    priority = arguments.get("x-priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        detail = f'"expected integer, got {type_name(priority)}"'
        raise _invalid("x-priority", queue, vhost, detail)


def _byte_length(value: Any) -> int:
    if isinstance(value, bytes):
        return len(value)
    return names.byte_length(value) if isinstance(value, str) else 0


def _normalise(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _same(left: Any, right: Any) -> bool:
    left, right = _normalise(left), _normalise(right)
    if isinstance(left, float) != isinstance(right, float):
        return False  # a double is never equal to an integer
    if isinstance(left, bool) != isinstance(right, bool):
        return False
    return bool(left == right)


def inequivalent(
    arg: str, kind: str, name: str, vhost: str, received: Any, current: Any, source: str
) -> errors.AMQPError:
    """The Q-2 406 text for one differing flag or argument."""
    prefix = f"inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': "
    if received is None:
        detail = (
            f"received none but current is the value '{format_value(current)}' "
            f"of type '{type_name(current, source)}'"
        )
    elif current is None:
        detail = (
            f"received the value '{format_value(received)}' of type "
            f"'{type_name(received)}' but current is none"
        )
    else:
        detail = f"received '{format_value(received)}' but current is '{format_value(current)}'"
    return errors.precondition_failed(prefix + detail)


def _classic(queue_type: Any) -> bool:
    return queue_type is None or format_value(queue_type) == "classic"


def check_queue_equivalence(
    name: str,
    vhost: str,
    current: dict[str, Any],
    received: dict[str, Any],
    *,
    current_source: str = "amqp",
) -> None:
    """Q-2: the compared arguments must match after integer normalisation."""
    compared: tuple[str, ...] = COMPARED_QUEUE_ARGUMENTS
    if streamargs.is_stream(current):
        compared += COMPARED_STREAM_ARGUMENTS
    for arg in compared:
        old, new = current.get(arg), received.get(arg)
        if arg == "x-queue-type" and {_classic(old), _classic(new)} == {True}:
            continue  # "classic" and no type are the same type; any other pair is compared
        if old is None and new is None:
            continue
        if old is None or new is None or not _same(old, new):
            raise inequivalent(arg, "queue", name, vhost, new, old, current_source)


def check_flag(arg: str, kind: str, name: str, vhost: str, received: bool, current: bool) -> None:
    if received != current:
        raise inequivalent(arg, kind, name, vhost, received, current, "amqp")


def check_replicated_properties(
    type_module: str,
    queue: str,
    vhost: str,
    *,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    generated: bool,
) -> None:
    """A quorum queue or a stream is durable, shared and named by its client.

    RabbitMQ refuses the other properties for both types with the same texts, in this order,
    naming the type by its module (``quorum.TYPE_MODULE``, ``streamargs.TYPE_MODULE``).
    """
    if generated:
        raise errors.precondition_failed(
            f"Cannot declare a server-named queue for type {type_module}"
        )
    for refused, name in (
        (auto_delete, "auto-delete"),
        (exclusive, "exclusive-owner"),
        (not durable, "non-durable"),
    ):
        if refused:
            raise errors.precondition_failed(
                f"invalid property '{name}' for queue '{queue}' in vhost '{vhost}'"
            )
