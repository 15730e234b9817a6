"""User: a broker user of an application's own, with its password in a Secret it can mount.

The password is never in the spec, status, events or logs: it is generated into (or imported
from) a Secret, and the operator sends it to the broker only as a password to hash. Rotation
is a change of that Secret, found by its ``resourceVersion`` (recorded in status), since the
operator watches no Secrets.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from hutch_operator.models import common, vhosts

CREDENTIALS_SUFFIX = "-user-credentials"


class UserLimits(common.CrdModel):
    """The broker's user limits; unset means no limit."""

    max_connections: int | None = Field(None, ge=0, description="max-connections (0: none).")
    max_channels: int | None = Field(None, ge=0, description="max-channels (0: none).")


class UserSpec(common.ConnectionSpec):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *common.TOPOLOGY_RULES,
                common.immutable_optional("name"),
            ]
        }
    )

    name: common.BrokerName | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="User name in the broker; defaults to metadata.name.",
        json_schema_extra={"x-kubernetes-validations": [common.name_bytes_rule()]},
    )
    tags: list[vhosts.Tag] = Field(
        default_factory=list,
        max_length=32,
        description="User tags: management, monitoring, policymaker, administrator, ...",
    )
    import_credentials_secret: common.SecretRef | None = Field(
        None,
        description="Secret in this namespace with key password (and optionally username, which "
        "must equal the user's name): use that password instead of a generated one.",
    )
    uri_vhost: str = Field(
        "/",
        min_length=1,
        description="Virtual host in the credentials Secret's AMQP URI; access comes from "
        "Permission objects.",
    )
    limits: UserLimits = common.nested(UserLimits, "User limits, changed in place.")
    deletion_policy: common.DeletionPolicy = Field(
        "delete", description="retain keeps the user when this object is deleted."
    )
    adopt: bool = vhosts.adopt_field("user")

    @property
    def vhost(self) -> str:
        """A user is a broker-wide object: its claim key has no enclosing vhost."""
        return ""


class UserStatus(common.TopologyStatus):
    credentials_secret: str | None = Field(
        None, description="Secret with username, password and amqp-uri for applications."
    )
    credentials_version: str | None = Field(
        None,
        description="resourceVersion of the password's Secret when it was last sent to the "
        "broker; a change means the password was rotated.",
    )
