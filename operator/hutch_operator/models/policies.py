"""Policy and OperatorPolicy: the mutable way to set limits on many queues at once.

OperatorPolicy keys are whitelisted by CEL, so a key the broker would refuse is refused at
admission instead of failing later with BrokerRejected. A stream's retention keys get the same
treatment: ``max-age`` and ``stream-max-segment-size-bytes`` are checked in a Policy (a
malformed ``max-age`` was otherwise stored by hutch-broker and then ignored), and refused in an
OperatorPolicy with a message that says where they belong (RabbitMQ 3.10.8 has no such operator
policy keys: docs/contracts/broker.md#pol-4).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WithJsonSchema, field_validator

from hutch_operator.models import common, streams

#: What hutch-broker's operator policies take: RabbitMQ 3.10.8's, without target-group-size
#: (3.10.8 refuses it there as not recognised, and so does hutch-broker), plus Hutch's ring-size.
OPERATOR_POLICY_KEYS = (
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "delivery-limit",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "ring-size",
)
#: Stream retention keys: a Policy's only (3.10.8 refuses them in operator policies).
STREAM_POLICY_KEYS = ("max-age", "stream-max-segment-size-bytes")
MAX_AGE_POLICY_MESSAGE = "definition max-age " + streams.MAX_AGE_MESSAGE.removeprefix("maxAge ")
SEGMENT_POLICY_MESSAGE = "definition stream-max-segment-size-bytes is an integer of at least 1"
OPERATOR_STREAM_MESSAGE = (
    "max-age and stream-max-segment-size-bytes are not operator-policy keys (RabbitMQ 3.10.8 "
    "refuses them there): set them in a Policy; an OperatorPolicy can "
    "cap a stream's size with max-length-bytes"
)
OPERATOR_KEYS_MESSAGE = "operator policies accept only " + ", ".join(OPERATOR_POLICY_KEYS)

#: A Policy's definition: free-form JSON the broker validates, with the stream keys typed so
#: the apiserver checks them (CEL sees only declared properties of a free-form object).
PolicyDefinition = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "max-age": {
                    "type": "string",
                    "maxLength": streams.MAX_AGE_LENGTH,
                    "x-kubernetes-validations": [
                        common.rule(
                            f"self.matches('{streams.MAX_AGE_PATTERN}')", MAX_AGE_POLICY_MESSAGE
                        )
                    ],
                },
                "stream-max-segment-size-bytes": {"type": "integer", "minimum": 1},
            },
        }
    ),
]


def definition_problems(definition: dict[str, Any]) -> list[str]:
    """A Policy definition's stream keys, as the CRD checks them."""
    found = []
    age = definition.get("max-age")
    if age is not None and not (
        isinstance(age, str)
        and len(age) <= streams.MAX_AGE_LENGTH
        and re.fullmatch(streams.MAX_AGE_PATTERN, age)
    ):
        found.append(MAX_AGE_POLICY_MESSAGE)
    size = definition.get("stream-max-segment-size-bytes")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        found.append(SEGMENT_POLICY_MESSAGE)
    return found


def operator_definition_problems(definition: dict[str, Any]) -> list[str]:
    """An OperatorPolicy definition's keys, as the CRD checks them."""
    found = []
    if any(key in definition for key in STREAM_POLICY_KEYS):
        found.append(OPERATOR_STREAM_MESSAGE)
    if any(key not in OPERATOR_POLICY_KEYS for key in definition):
        found.append(OPERATOR_KEYS_MESSAGE)
    return found


def _refuse(found: list[str]) -> None:
    if found:
        raise ValueError("; ".join(found))


class PolicySpec(common.TopologySpec):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": common.NAMED_RULES})

    name: common.BrokerName | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="Policy name; defaults to metadata.name.",
        json_schema_extra={"x-kubernetes-validations": [common.name_bytes_rule()]},
    )
    pattern: str = Field(description="Regular expression (unanchored) matched against names.")
    apply_to: Literal[
        "queues", "classic_queues", "quorum_queues", "streams", "exchanges", "all"
    ] = Field("all", description="Which objects the policy applies to.")
    priority: int = Field(0, description="The highest priority matching policy applies.")
    definition: PolicyDefinition = Field(
        description="Policy keys and values; the broker validates them (max-age and "
        "stream-max-segment-size-bytes are checked at admission too).",
        json_schema_extra={"minProperties": 1},
    )

    @field_validator("definition")
    @classmethod
    def _stream_keys(cls, definition: dict[str, Any]) -> dict[str, Any]:
        _refuse(definition_problems(definition))
        return definition


class OperatorPolicySpec(common.TopologySpec):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": common.NAMED_RULES})

    name: common.BrokerName | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="Policy name; defaults to metadata.name.",
        json_schema_extra={"x-kubernetes-validations": [common.name_bytes_rule()]},
    )
    pattern: str = Field(description="Regular expression (unanchored) matched against names.")
    apply_to: Literal["queues", "classic_queues", "quorum_queues", "streams"] = Field(
        "queues", description="Which queues the operator policy applies to."
    )
    priority: int = Field(0, description="The highest priority matching policy applies.")
    definition: dict[str, common.IntOrString] = Field(
        description="Operator-policy keys; the lower numeric value of this and the user "
        "policy wins.",
        json_schema_extra={
            "minProperties": 1,
            "maxProperties": 16,
            "x-kubernetes-validations": [
                common.rule(
                    "!self.exists(k, k in " + repr(list(STREAM_POLICY_KEYS)) + ")",
                    OPERATOR_STREAM_MESSAGE,
                ),
                common.rule(
                    "self.all(k, k in " + repr(list(OPERATOR_POLICY_KEYS)) + ")",
                    OPERATOR_KEYS_MESSAGE,
                ),
            ],
        },
    )

    @field_validator("definition")
    @classmethod
    def _keys(cls, definition: dict[str, Any]) -> dict[str, Any]:
        _refuse(operator_definition_problems(definition))
        return definition


class PolicyStatus(common.TopologyStatus):
    pass
