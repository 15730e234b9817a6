"""A Queue of ``type: stream``: its retention block and what RabbitMQ refuses for a stream.

Contract: docs/contracts/operator.md#stream-queues.

Why admission refuses these and not the broker: RabbitMQ 3.10.8 refuses a non-durable or
auto-delete stream and the arguments of other queue types (406, ``of queue type
rabbit_stream_queue``; hutch-broker answers the same, docs/contracts/broker.md#st-1). Without
the rules such a Queue was admitted and then ``BrokerRejected`` forever; with them ``kubectl
apply`` says what is wrong before anything is stored. The same rules run in the model, so an
object admitted by an older CRD is ``InvalidSpec`` without a broker round trip.

Why ``maxAge`` and ``maxSegmentSizeBytes`` are a block of their own and immutable, while the
size retention is ``limits.maxLengthBytes``: ``limits`` are the arguments Hutch brokers change
in place (``x-max-length-bytes`` is one of them, for a stream as for a classic queue);
``x-max-age`` and ``x-stream-max-segment-size-bytes`` are fixed at declaration on every broker
(a redeclare with another value is 406 "inequivalent arg"), so a change is refused at admission,
pointing to a Policy, which is how RabbitMQ changes a live stream's retention.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator
from pydantic.alias_generators import to_camel

from hutch_operator.models import common

#: RabbitMQ's ``x-max-age``: a number and one unit, years (365 days), months (30 days), days,
#: hours, minutes, seconds. Zero is refused (``invalid_max_age``); a malformed value makes
#: 3.10.8 close the connection with 541, so the format is checked before it is sent.
MAX_AGE_PATTERN = "^[0-9]*[1-9][0-9]*[YMDhms]$"
MAX_AGE_MESSAGE = (
    "maxAge is a positive number and one unit, as RabbitMQ's x-max-age: Y (years), M (months), "
    "D (days), h, m or s (for example 7D, 12h, 30m, 10s)"
)
MAX_AGE_LENGTH = 20

#: Stream field (Python name) → queue argument.
STREAM_ARGUMENTS: dict[str, str] = {
    "max_age": "x-max-age",
    "max_segment_size_bytes": "x-stream-max-segment-size-bytes",
}

#: The arguments of other queue types that RabbitMQ 3.10.8 refuses on a stream (observed side
#: by side, docs/contracts/broker.md#st-1), with the Queue field that sets each, if any; and
#: Hutch's ring, which elsewhere becomes x-max-length with drop-head.
REFUSED_ARGUMENTS: dict[str, str | None] = {
    "x-max-length": "limits.maxLength",
    "x-overflow": "limits.overflow",
    "x-message-ttl": "limits.messageTtl",
    "x-expires": "limits.expires",
    "x-dead-letter-exchange": "limits.deadLetterExchange",
    "x-dead-letter-routing-key": "limits.deadLetterRoutingKey",
    "x-ring-size": "limits.ringSize",  # Hutch's: both brokers accept it on a stream (201)
    "x-single-active-consumer": "singleActiveConsumer",
    "x-max-priority": None,
    "x-queue-mode": None,
    "x-queue-version": None,
    "x-delivery-limit": None,
    "x-dead-letter-strategy": None,
    "x-max-in-memory-length": None,
    "x-max-in-memory-bytes": None,
    "x-quorum-initial-group-size": None,
}
RETENTION_HINT = "a stream keeps its messages: retention is limits.maxLengthBytes and stream.maxAge"


class StreamSettings(common.CrdModel):
    """A stream's retention arguments that are fixed at declaration."""

    max_age: str | None = Field(
        None,
        max_length=MAX_AGE_LENGTH,
        description="x-max-age: segments whose newest message is older are dropped (7D, 12h, "
        "30m, 10s; Y and M are 365 and 30 days).",
        json_schema_extra={
            "x-kubernetes-validations": [
                common.rule(f"self.matches('{MAX_AGE_PATTERN}')", MAX_AGE_MESSAGE)
            ]
        },
    )
    # ≥ 1: both brokers take 0, which hutch-broker treats as unset; one spec, one meaning.
    max_segment_size_bytes: int | None = Field(
        None,
        ge=1,
        description="x-stream-max-segment-size-bytes: a segment closes at this size; retention "
        "drops whole segments (hutch-broker: at most its store's 8 MiB).",
    )

    @field_validator("max_age")
    @classmethod
    def _max_age(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(MAX_AGE_PATTERN, value):
            raise ValueError(MAX_AGE_MESSAGE)
        return value

    def as_arguments(self) -> dict[str, int | str]:
        values = self.model_dump(exclude_none=True)
        return {STREAM_ARGUMENTS[key]: value for key, value in values.items()}


IMMUTABLE_MESSAGE = (
    "stream is immutable: RabbitMQ fixes x-max-age and x-stream-max-segment-size-bytes at "
    "declaration; change a live stream's retention with a Policy that matches it (max-age, "
    "stream-max-segment-size-bytes, max-length-bytes), or delete and re-create the object"
)
IMMUTABLE = {
    "x-kubernetes-validations": [
        common.rule("self == oldSelf", IMMUTABLE_MESSAGE, reason="FieldValueForbidden")
    ]
}
DURABLE_MESSAGE = "streams are durable: RabbitMQ refuses a non-durable stream"
AUTO_DELETE_MESSAGE = "streams cannot be autoDelete: RabbitMQ refuses an auto-delete stream"
ONLY_STREAMS_MESSAGE = "stream settings apply only to type: stream"
ARGUMENT_AGE_MESSAGE = "x-max-age in arguments " + MAX_AGE_MESSAGE.removeprefix("maxAge ")


def refusal_message(argument: str, field: str | None) -> str:
    where = f"{field} ({argument})" if field else f"argument {argument}"
    why = ", as RabbitMQ does"
    if argument == "x-ring-size":  # Hutch's; elsewhere x-max-length, which RabbitMQ refuses
        why = ": a ring is a classic queue"
    hint = f"; {RETENTION_HINT}" if field and field.startswith("limits.") else ""
    return f"type: stream refuses {where}{why}{hint}"


def twice_message(field: str, argument: str) -> str:
    return f"stream.{to_camel(field)} must not also appear in arguments ({argument})"


def _argument(argument: str) -> str:
    return f"(has(self.arguments) && has(self.arguments.{common.cel_field(argument)}))"


def _field(path: str) -> str:
    """``has()`` of a nested field, its parent guarded (``limits.maxLength``)."""
    parent, _, _ = path.partition(".")
    return f"(has(self.{parent}) && has(self.{path}))"


def _label(argument: str, field: str | None) -> str:
    return f"{field} ({argument})" if field else f"argument {argument}"


def _present(argument: str, field: str | None) -> str:
    present = [_argument(argument)]
    if field == "singleActiveConsumer":
        present.append("self.singleActiveConsumer")
    elif field is not None:
        present.append(_field(field))
    return " || ".join(present)


def _refusals_message_expression() -> str:
    """CEL that names every refused argument the object sets, in ``refusal_message``'s words.

    Plain concatenation: a list literal filtered and joined is estimated by the apiserver at
    more than a hundred times its rule cost budget."""
    items = " + ".join(
        f"(({_present(argument, field)}) ? '{_label(argument, field)}, ' : '')"
        for argument, field in REFUSED_ARGUMENTS.items()
    )
    limits = " || ".join(
        f"({_present(argument, field)})"
        for argument, field in REFUSED_ARGUMENTS.items()
        if field and field.startswith("limits.")
    )
    ring = _present("x-ring-size", "limits.ringSize")
    return (
        f"'type: stream refuses ' + {items} + 'as RabbitMQ does' + "
        f"(({ring}) ? ' (a ring is a classic queue)' : '') + "
        f"(({limits}) ? '; {RETENTION_HINT}' : '')"
    )


def spec_rules() -> list[Any]:
    """The Queue spec's CEL rules for streams (the spec object sees ``type`` and the rest).

    The refused arguments are one rule whose message names each one the object sets: the
    apiserver evaluates every rule of the spec on every write, status PATCHes included, so at
    10,000 Queues sixteen rules (one per argument) cost the apiserver about 30 % more CPU than
    the one (docs/isolation/operator.md)."""
    settings = " || ".join(_field("stream." + to_camel(field)) for field in STREAM_ARGUMENTS)
    refused = " || ".join(
        f"({_present(argument, field)})" for argument, field in REFUSED_ARGUMENTS.items()
    )
    listed = ", ".join(_label(argument, field) for argument, field in REFUSED_ARGUMENTS.items())
    rules = [
        common.rule("self.type != 'stream' || self.durable", DURABLE_MESSAGE),
        common.rule("self.type != 'stream' || !self.autoDelete", AUTO_DELETE_MESSAGE),
        common.rule(f"self.type == 'stream' || !({settings})", ONLY_STREAMS_MESSAGE),
        {
            "rule": f"self.type != 'stream' || !({refused})",
            "message": f"type: stream refuses the arguments of other queue types ({listed})",
            "messageExpression": _refusals_message_expression(),
        },
    ]
    for field, argument in STREAM_ARGUMENTS.items():
        expression = f"!({_field('stream.' + to_camel(field))} && {_argument(argument)})"
        rules.append(common.rule(expression, twice_message(field, argument)))
    return rules


#: Arguments the rules ask ``has()`` of, beside the limits (``common.arguments_field``): a number
#: or a string, as RabbitMQ takes each, but x-single-active-consumer, a boolean. Declaring them
#: refuses other JSON types at admission, which RabbitMQ 3.10.8 refuses too ("expected integer",
#: ``unacceptable_type``), but for a quorum queue's x-delivery-limit, stored unchecked there.
TYPED_ARGUMENTS = {"x-single-active-consumer": {"type": "boolean"}}
KNOWN_ARGUMENTS = tuple(
    key for key in (*REFUSED_ARGUMENTS, *STREAM_ARGUMENTS.values()) if key not in TYPED_ARGUMENTS
)


def problems(spec: Any) -> list[str]:
    """The same refusals for a parsed ``QueueSpec``, plus a malformed ``x-max-age`` in
    ``arguments`` (CEL cannot afford a regex over an argument of unbounded length)."""
    stream_set = spec.stream.model_dump(exclude_none=True)
    found = [
        twice_message(field, argument)
        for field, argument in STREAM_ARGUMENTS.items()
        if field in stream_set and argument in spec.arguments
    ]
    if spec.type != "stream":
        return [ONLY_STREAMS_MESSAGE] if stream_set else found
    if not spec.durable:
        found.append(DURABLE_MESSAGE)
    if spec.auto_delete:
        found.append(AUTO_DELETE_MESSAGE)
    limits = spec.limits.as_arguments()
    for argument, field in REFUSED_ARGUMENTS.items():
        sac = field == "singleActiveConsumer" and spec.single_active_consumer
        if argument in spec.arguments or argument in limits or sac:
            found.append(refusal_message(argument, field))
    age = spec.arguments.get("x-max-age")
    if age is not None and not (isinstance(age, str) and re.fullmatch(MAX_AGE_PATTERN, age)):
        found.append(ARGUMENT_AGE_MESSAGE)
    return found
