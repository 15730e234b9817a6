"""Binding: no name of its own; its identity is every field, so every field is immutable."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from hutch_operator.models import common


class BindingSpec(common.TopologySpec):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": common.TOPOLOGY_RULES})

    source: common.BrokerName = Field(
        min_length=1,
        max_length=255,
        description="Source exchange.",
        json_schema_extra=common.immutable("source", common.name_bytes_rule()),
    )
    destination: common.BrokerName = Field(
        min_length=1,
        max_length=255,
        description="Destination queue or exchange.",
        json_schema_extra=common.immutable("destination", common.name_bytes_rule()),
    )
    destination_type: Literal["queue", "exchange"] = Field(
        "queue", json_schema_extra=common.immutable("destinationType")
    )
    routing_key: common.BrokerName = Field(
        "",
        max_length=255,
        description="Routing key (at most 255 bytes in UTF-8, as the broker takes it).",
        json_schema_extra=common.immutable("routingKey", common.name_bytes_rule("a routing key")),
    )
    arguments: dict[str, common.ArgumentValue] = common.arguments_field(
        "Binding arguments (any JSON value)."
    )


class BindingStatus(common.TopologyStatus):
    pass
