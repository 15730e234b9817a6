"""Permission: what one user may configure, write and read in one vhost (regexes).

The apiserver checks what it can cheaply: names are immutable, and patterns with
backreferences or lookaround are refused (hutch-broker matches permissions with a Thompson NFA
and refuses them too); everything else about a regex the broker judges (BrokerRejected).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from hutch_operator.models import common

PATTERN_RULES = [
    common.rule(
        "!self.matches('\\\\\\\\[1-9]')",
        "backreferences (\\1 to \\9) are not supported in permission patterns",
    ),
    common.rule(
        "!self.matches('\\\\(\\\\?<?[=!]')",
        "lookahead and lookbehind are not supported in permission patterns",
    ),
]


def pattern_field(what: str) -> Any:
    return Field(
        "",
        max_length=4096,
        description=f"Regex (unanchored) of what the user may {what}; '' grants none "
        "(on topic permissions: only the empty routing key), '.*' all.",
        json_schema_extra={"x-kubernetes-validations": PATTERN_RULES},
    )


class PermissionSpec(common.TopologySpec):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [*common.TOPOLOGY_RULES],
        }
    )

    user: common.BrokerName = Field(
        min_length=1,
        max_length=255,
        description="The broker user (a User's name) these permissions are for.",
        json_schema_extra=common.immutable("user", common.name_bytes_rule()),
    )
    configure: str = pattern_field("declare and delete")
    write: str = pattern_field("publish to (and bind from)")
    read: str = pattern_field("consume from (and bind to)")
    adopt: bool = Field(
        False,
        description="Manage permissions the user already has in this vhost (and delete them "
        "with this object); without it they are refused (AlreadyExists) and left alone.",
    )


class PermissionStatus(common.TopologyStatus):
    pass
