"""Queue: spec, status and the limit → queue-argument table.

Contract: docs/contracts/operator.md#queue-fields.

``limits`` are typed because they are the one part of a queue's arguments that Hutch brokers can
change in place; everything else in ``arguments`` is fixed at declaration (CEL ``self == oldSelf``).
A stream's own settings and refusals are in ``models.streams``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from hutch_operator.models import common, streams

QueueType = Literal["classic", "quorum", "stream"]
Overflow = Literal["drop-head", "reject-publish", "reject-publish-dlx"]

#: Typed limit field (Python name) → queue argument.
LIMIT_ARGUMENTS: dict[str, str] = {
    "max_length": "x-max-length",
    "max_length_bytes": "x-max-length-bytes",
    "overflow": "x-overflow",
    "message_ttl": "x-message-ttl",
    "expires": "x-expires",
    "ring_size": "x-ring-size",
    "dead_letter_exchange": "x-dead-letter-exchange",
    "dead_letter_routing_key": "x-dead-letter-routing-key",
}


class QueueLimits(common.CrdModel):
    """Length, TTL and dead-letter settings; changed in place on Hutch brokers."""

    max_length: int | None = Field(None, ge=0, description="x-max-length (messages).")
    max_length_bytes: int | None = Field(None, ge=0, description="x-max-length-bytes.")
    overflow: Overflow | None = Field(None, description="x-overflow behaviour.")
    message_ttl: int | None = Field(None, ge=0, description="x-message-ttl in ms.")
    expires: int | None = Field(None, ge=1, description="x-expires in ms.")
    ring_size: int | None = Field(
        None, ge=1, description="x-ring-size (Hutch); max-length + drop-head elsewhere."
    )
    dead_letter_exchange: str | None = Field(None, description="x-dead-letter-exchange.")
    dead_letter_routing_key: str | None = Field(None, description="x-dead-letter-routing-key.")

    def as_arguments(self) -> dict[str, int | str]:
        values = self.model_dump(exclude_none=True)
        return {LIMIT_ARGUMENTS[key]: value for key, value in values.items()}


def _no_limit_in_arguments() -> Any:
    clauses = " || ".join(
        f"(has(self.limits.{to_camel(field)}) && has(self.arguments.{common.cel_field(argument)}))"
        for field, argument in LIMIT_ARGUMENTS.items()
    )
    return common.rule(
        f"!has(self.limits) || !has(self.arguments) || !({clauses})",
        "a limit set in limits must not also appear in arguments",
    )


class QueueSpec(common.TopologySpec):
    """A queue declared through PUT /api/queues/{vhost}/{name}."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *common.NAMED_RULES,
                common.rule("self.type != 'quorum' || self.durable", "quorum queues are durable"),
                _no_limit_in_arguments(),
                *streams.spec_rules(),
            ]
        }
    )

    name: common.BrokerName | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="Queue name; defaults to metadata.name. Must not start with amq.",
        json_schema_extra={
            "x-kubernetes-validations": [
                common.rule("!self.startsWith('amq.')", "names starting with amq. are reserved"),
                common.name_bytes_rule(),
            ]
        },
    )
    type: QueueType = Field(
        "classic", description="Queue type.", json_schema_extra=common.immutable("type")
    )
    durable: bool = Field(True, json_schema_extra=common.immutable("durable"))
    auto_delete: bool = Field(False, json_schema_extra=common.immutable("autoDelete"))
    limits: QueueLimits = common.nested(
        QueueLimits,
        "Length, TTL and dead-letter limits. On Hutch brokers a change applies in place; "
        "elsewhere use a Policy or OperatorPolicy for limits that change.",
    )
    arguments: dict[str, common.ArgumentValue] = common.arguments_field(
        "Other x- queue arguments (any JSON value), fixed at declaration. Prefer limits, Policy "
        "or OperatorPolicy.",
        known=(*LIMIT_ARGUMENTS.values(), *streams.KNOWN_ARGUMENTS),
        typed=streams.TYPED_ARGUMENTS,
    )
    stream: streams.StreamSettings = common.nested(
        streams.StreamSettings,
        "type: stream only: retention fixed at declaration (x-max-age, "
        "x-stream-max-segment-size-bytes); size retention is limits.maxLengthBytes.",
        **streams.IMMUTABLE,
    )
    single_active_consumer: bool = Field(
        False,
        description="x-single-active-consumer.",
        json_schema_extra=common.immutable("singleActiveConsumer"),
    )
    delete_if_empty: bool = Field(
        True, description="On delete, keep the queue (and its messages) unless it is empty."
    )
    delete_if_unused: bool = Field(
        False, description="On delete, keep the queue while it has consumers."
    )

    @model_validator(mode="after")
    def _stream_rules(self) -> QueueSpec:
        """The CRD's stream rules, for an object an older CRD admitted (``InvalidSpec``)."""
        found = streams.problems(self)
        if found:
            raise ValueError("; ".join(found))
        return self


class QueueStatus(common.TopologyStatus):
    messages: int | None = None
    messages_ready: int | None = None
    messages_unacknowledged: int | None = None
    consumers: int | None = None
    policy: str | None = None
    operator_policy: str | None = None
    effective_policy_definition: common.FreeForm | None = None
    first_offset: int | None = Field(
        None, description="A stream's first offset held (hutch-broker only; null elsewhere)."
    )
    last_offset: int | None = Field(
        None, description="A stream's newest offset a consumer may read (null while empty)."
    )
    segments: int | None = Field(None, description="A stream's segment count (hutch-broker).")
    stats_updated_at: str | None = None
