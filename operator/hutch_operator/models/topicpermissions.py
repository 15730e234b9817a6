"""TopicPermission: which routing keys one user may publish with (write) and bind with (read)
on one topic exchange of one vhost.

The broker checks them on topic exchanges only, and a user with no topic permission for an
exchange may use any routing key there; ``{username}`` and ``{vhost}`` in a pattern stand for
the connection's user and vhost. Patterns get the same admission checks as Permission's.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from hutch_operator.models import common, permissions


class TopicPermissionSpec(common.TopologySpec):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": common.TOPOLOGY_RULES})

    user: common.BrokerName = Field(
        min_length=1,
        max_length=255,
        description="The broker user (a User's name) these topic permissions are for.",
        json_schema_extra=common.immutable("user", common.name_bytes_rule()),
    )
    exchange: common.BrokerName = Field(
        min_length=1,
        max_length=255,
        description="The topic exchange whose routing keys are checked.",
        json_schema_extra=common.immutable("exchange", common.name_bytes_rule()),
    )
    write: str = permissions.pattern_field("publish with")
    read: str = permissions.pattern_field("bind (and unbind) with")
    adopt: bool = Field(
        False,
        description="Manage a topic permission the user already has on this exchange (and "
        "delete it with this object); without it that is refused (AlreadyExists).",
    )


class TopicPermissionStatus(common.TopologyStatus):
    pass
