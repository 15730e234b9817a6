"""Exchange: declared through PUT /api/exchanges/{vhost}/{name}; nothing changes after that."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from hutch_operator.models import common


class ExchangeSpec(common.TopologySpec):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": common.NAMED_RULES})

    name: common.BrokerName | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="Exchange name; defaults to metadata.name. Must not start with amq.",
        json_schema_extra={
            "x-kubernetes-validations": [
                common.rule("!self.startsWith('amq.')", "names starting with amq. are reserved"),
                common.name_bytes_rule(),
            ]
        },
    )
    type: str = Field(
        "direct",
        pattern=r"^(direct|fanout|topic|headers|x-.+)$",
        description="direct, fanout, topic, headers, or a plugin type starting with x-.",
        json_schema_extra=common.immutable("type"),
    )
    durable: bool = Field(True, json_schema_extra=common.immutable("durable"))
    auto_delete: bool = Field(False, json_schema_extra=common.immutable("autoDelete"))
    internal: bool = Field(False, json_schema_extra=common.immutable("internal"))
    arguments: dict[str, common.ArgumentValue] = common.arguments_field(
        "Exchange arguments (any JSON value), fixed at declaration; use an alternate-exchange "
        "Policy instead."
    )


class ExchangeStatus(common.TopologyStatus):
    pass
