"""Policy and OperatorPolicy: the mutable way to set limits on many queues at once.

OperatorPolicy keys are whitelisted by CEL, so a key the broker would refuse is refused at
admission instead of failing later with BrokerRejected.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from hutch_operator.models import common

OPERATOR_POLICY_KEYS = (
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "delivery-limit",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "target-group-size",
    "ring-size",
)


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
    definition: common.FreeForm = Field(
        description="Policy keys and values; the broker validates them.",
        json_schema_extra={"minProperties": 1},
    )


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
                    "self.all(k, k in " + repr(list(OPERATOR_POLICY_KEYS)) + ")",
                    "operator policies accept only " + ", ".join(OPERATOR_POLICY_KEYS),
                )
            ],
        },
    )


class PolicyStatus(common.TopologyStatus):
    pass
