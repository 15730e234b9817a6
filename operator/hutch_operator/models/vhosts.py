"""Vhost: a virtual host of its own for a team, so Queues outside ``/`` stop failing with
VhostNotFound and tenants stop sharing one namespace of broker objects.

Deleting a vhost deletes everything in it (RabbitMQ and Hutch alike: queues, messages,
exchanges, bindings, policies, permissions), so ``deleteIfEmpty`` (default true) keeps a vhost
that still holds queues, as ``deleteIfEmpty`` keeps a Queue that holds messages.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from hutch_operator.models import common

QueueType = Literal["classic", "quorum", "stream"]

#: One tag: the broker splits tag strings at commas, so a comma would make two tags.
Tag = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        json_schema_extra={
            "x-kubernetes-validations": [
                common.rule("!self.contains(',')", "tags must not contain commas")
            ]
        },
    ),
]


def adopt_field(what: str) -> Any:
    description = (
        f"Manage a {what} that already exists in the broker (and delete it with this object). "
        f"Without it, an existing {what} this object did not create is refused (AlreadyExists) "
        "and never changed or deleted."
    )
    return Field(False, description=description)


class VhostLimits(common.CrdModel):
    """The broker's vhost limits; unset means no limit."""

    max_connections: int | None = Field(None, ge=0, description="max-connections (0: none).")
    max_queues: int | None = Field(None, ge=0, description="max-queues (0: none).")


class VhostSpec(common.ConnectionSpec):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *common.TOPOLOGY_RULES,
                common.immutable_optional("name"),
                common.immutable_optional("defaultQueueType"),
            ]
        }
    )

    name: common.BrokerName | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="Virtual host name; defaults to metadata.name.",
        json_schema_extra={"x-kubernetes-validations": [common.name_bytes_rule()]},
    )
    description: str = Field("", max_length=1000, description="Free text shown by the broker.")
    tags: list[Tag] = Field(
        default_factory=list, max_length=32, description="Vhost tags (no commas)."
    )
    default_queue_type: QueueType | None = Field(
        None,
        description="Queue type for declarations that name none. hutch-broker applies classic "
        "and quorum as RabbitMQ 4.x does (quorum where the queue is durable, shared and "
        "client-named, else classic); RabbitMQ 3.10.8 accepts and ignores it (reports "
        "undefined).",
    )
    limits: VhostLimits = common.nested(VhostLimits, "Vhost limits, changed in place.")
    deletion_policy: common.DeletionPolicy = Field(
        "delete", description="retain keeps the vhost (and all in it) when this object is deleted."
    )
    delete_if_empty: bool = Field(
        True,
        description="Delete the vhost only when it holds no queues; false deletes it with all "
        "its queues and messages.",
    )
    adopt: bool = adopt_field("vhost")

    @property
    def vhost(self) -> str:
        """A vhost is a broker-wide object: its claim key has no enclosing vhost."""
        return ""


class VhostStatus(common.TopologyStatus):
    name: str | None = Field(
        None, description="The vhost's name in the broker: spec.name, else metadata.name."
    )
