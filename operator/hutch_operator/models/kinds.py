"""The kinds: names, printer columns and models, used by crdgen and the handlers alike."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from hutch_operator.models import (
    bindings,
    brokers,
    common,
    exchanges,
    permissions,
    policies,
    queues,
    topicpermissions,
    users,
    vhosts,
)

READY = '.status.conditions[?(@.type=="Ready")].status'


@dataclass(frozen=True)
class Column:
    name: str
    json_path: str
    type: str = "string"
    priority: int = 0

    def as_crd(self) -> dict[str, object]:
        column: dict[str, object] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
        }
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    short: str
    spec: type[BaseModel]
    status: type[BaseModel]
    columns: tuple[Column, ...]
    #: CEL rules on the whole object (they alone see ``metadata.name``).
    rules: tuple[dict[str, str], ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{common.GROUP}"


_READY = Column("Ready", READY)
#: ``spec.name`` defaults to ``metadata.name``, so the reserved prefix is checked on both.
_AMQ_NAME = common.rule(
    "has(self.spec.name) || !self.metadata.name.startsWith('amq.')",
    "metadata.name is the broker object's name when spec.name is unset: names starting with "
    "amq. are reserved",
)
_AGE = Column("Age", ".metadata.creationTimestamp", "date")

BROKER = Kind(
    "Broker",
    "brokers",
    "hbr",
    brokers.BrokerSpec,
    brokers.BrokerStatus,
    (
        _READY,
        Column("Available", '.status.conditions[?(@.type=="Available")].status'),
        Column("Watermark", ".status.memory.highWatermarkBytes", "integer"),
        Column("Endpoint", ".status.endpoint.amqp", priority=1),
        Column("Version", ".status.brokerVersion", priority=1),
        _AGE,
    ),
)
QUEUE = Kind(
    "Queue",
    "queues",
    "hq",
    queues.QueueSpec,
    queues.QueueStatus,
    (
        _READY,
        Column("Messages", ".status.messages", "integer"),
        Column("Consumers", ".status.consumers", "integer"),
        Column("Policy", ".status.policy"),
        Column("Vhost", ".spec.vhost", priority=1),
        Column("Type", ".spec.type", priority=1),
        # A stream's offsets (hutch-broker reports them; empty elsewhere): -o wide only.
        Column("First Offset", ".status.firstOffset", "integer", priority=1),
        Column("Last Offset", ".status.lastOffset", "integer", priority=1),
        _AGE,
    ),
    (_AMQ_NAME,),
)
EXCHANGE = Kind(
    "Exchange",
    "exchanges",
    "hx",
    exchanges.ExchangeSpec,
    exchanges.ExchangeStatus,
    (_READY, Column("Type", ".spec.type"), _AGE),
    (_AMQ_NAME,),
)
BINDING = Kind(
    "Binding",
    "bindings",
    "hbd",
    bindings.BindingSpec,
    bindings.BindingStatus,
    (_READY, Column("Source", ".spec.source"), Column("Destination", ".spec.destination"), _AGE),
)
_POLICY_COLUMNS = (
    _READY,
    Column("Pattern", ".spec.pattern"),
    Column("Priority", ".spec.priority", "integer"),
    _AGE,
)
POLICY = Kind(
    "Policy", "policies", "hpol", policies.PolicySpec, policies.PolicyStatus, _POLICY_COLUMNS
)
OPERATOR_POLICY = Kind(
    "OperatorPolicy",
    "operatorpolicies",
    "hopol",
    policies.OperatorPolicySpec,
    policies.PolicyStatus,
    _POLICY_COLUMNS,
)

VHOST = Kind(
    "Vhost",
    "vhosts",
    "hvh",
    vhosts.VhostSpec,
    vhosts.VhostStatus,
    (_READY, Column("Vhost", ".status.name"), _AGE),  # spec.name's default is metadata.name
)
USER = Kind(
    "User",
    "users",
    "hu",
    users.UserSpec,
    users.UserStatus,
    (_READY, Column("Secret", ".status.credentialsSecret"), _AGE),
)
PERMISSION = Kind(
    "Permission",
    "permissions",
    "hperm",
    permissions.PermissionSpec,
    permissions.PermissionStatus,
    (_READY, Column("User", ".spec.user"), Column("Vhost", ".spec.vhost"), _AGE),
)
TOPIC_PERMISSION = Kind(
    "TopicPermission",
    "topicpermissions",
    "htp",
    topicpermissions.TopicPermissionSpec,
    topicpermissions.TopicPermissionStatus,
    (
        _READY,
        Column("User", ".spec.user"),
        Column("Exchange", ".spec.exchange"),
        Column("Vhost", ".spec.vhost", priority=1),
        _AGE,
    ),
)

ALL = (BROKER, QUEUE, EXCHANGE, BINDING, POLICY, OPERATOR_POLICY, VHOST, USER, PERMISSION,
       TOPIC_PERMISSION)  # fmt: skip
TOPOLOGY = (QUEUE, EXCHANGE, BINDING, POLICY, OPERATOR_POLICY, VHOST, USER, PERMISSION,
            TOPIC_PERMISSION)  # fmt: skip
BY_KIND = {kind.kind: kind for kind in ALL}
