"""Shared model pieces: the camelCase base, CEL helpers, references and status conditions.

CEL rules travel as ``x-kubernetes-validations`` inside ``json_schema_extra`` so crdgen copies
them verbatim; immutability is enforced by the apiserver (422), never by a webhook.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

GROUP = "hutch.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

IMMUTABLE_MESSAGE = "{field} is immutable; delete and re-create the object"

#: A map value that may be a number or a string, as Kubernetes' IntOrString.
IntOrString = Annotated[int | str, WithJsonSchema({"x-kubernetes-int-or-string": True})]
#: An AMQP argument's value as JSON: a string, number, boolean, list or table, as the management
#: API takes it (and as RabbitMQ's topology operator does). The schema keeps it as written; the
#: broker validates it, and a refused argument is the object's Ready reason.
ArgumentValue = Annotated[
    bool | int | float | str | list[Any] | dict[str, Any],
    WithJsonSchema({"x-kubernetes-preserve-unknown-fields": True}),
]
#: Free-form JSON the apiserver keeps as written (validated by the broker, not the schema).
FreeForm = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


#: AMQP names (shortstr) stop at 255 *bytes*; the CRD's ``maxLength`` counts characters.
NAME_BYTES = 255


def _at_most_name_bytes(value: str) -> str:
    """Refuse names over 255 UTF-8 bytes: 200 times "é" is 200 characters but 400 bytes."""
    size = len(value.encode())
    if size > NAME_BYTES:
        raise ValueError(f"must be at most {NAME_BYTES} bytes in UTF-8, not {size}")
    return value


#: A broker object's name: the CRD counts characters *and* bytes (CEL), the operator bytes too.
BrokerName = Annotated[str, AfterValidator(_at_most_name_bytes)]


def rule(expression: str, message: str, *, reason: str | None = None) -> Any:
    """One ``x-kubernetes-validations`` entry."""
    entry = {"rule": expression, "message": message}
    if reason:
        entry["reason"] = reason
    return entry


def name_bytes_rule(what: str = "a name") -> Any:
    """The CEL rule that counts a name's UTF-8 bytes (``maxLength`` counts characters only).

    Routing keys are shortstrs too (``what``: "a routing key"): without the rule one of 256
    bytes was admitted and then refused by the broker."""
    return rule(
        f"size(bytes(self)) <= {NAME_BYTES}",
        f"must be at most {NAME_BYTES} bytes in UTF-8 ({what} of multi-byte characters is longer "
        "in bytes than in characters)",
    )


def immutable(field: str, *more: Any) -> dict[str, Any]:
    """The field-level rule for an immutable field that always exists (it has a default).

    ``more`` are further rules on the same field (one ``x-kubernetes-validations`` list).
    """
    message = IMMUTABLE_MESSAGE.format(field=field)
    return {
        "x-kubernetes-validations": [
            rule("self == oldSelf", message, reason="FieldValueForbidden"),
            *more,
        ]
    }


def immutable_optional(field: str) -> Any:
    """The parent-level rule for an optional immutable field (absent stays absent)."""
    expression = (
        f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})"
    )
    return rule(expression, IMMUTABLE_MESSAGE.format(field=field), reason="FieldValueForbidden")


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON, types included: Python's ``True == 1`` must not hide an argument that
    is ``true`` on one side and ``1`` on the other (the broker treats them differently)."""
    if type(a) is type(b) and isinstance(a, str | int | bool | None):
        return bool(a == b)  # the common case, without encoding (a drift sweep compares many)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def cel_field(key: str) -> str:
    """A property name as CEL reads it: the apiserver escapes ``_``, ``.``, ``-`` and ``/``."""
    for char, escape in (("__", "__underscores__"), (".", "__dot__"), ("-", "__dash__"),
                         ("/", "__slash__")):  # fmt: skip
        key = key.replace(char, escape)
    return key


def arguments_field(
    description: str, known: tuple[str, ...] = (), typed: dict[str, Any] | None = None
) -> Any:
    """An immutable ``x-`` argument map of JSON values; ``default: {}`` so the rule always runs.

    CEL cannot type a map whose values may be anything (the CRD is refused with "failed to
    convert to declType"), so the map is an object that keeps unknown fields: ``self ==
    oldSelf`` still compares all of it, types included. ``known`` keys are declared as
    properties (a number or a string) so that other rules can ask ``has()`` of them; CEL sees
    no property without a type (the CRD is refused with "undefined field"), so a key whose value
    is neither is given its schema in ``typed`` (``{"x-flag": {"type": "boolean"}}``).
    """

    def schema(field: dict[str, Any]) -> None:
        field.pop("additionalProperties", None)
        field.update({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
        properties: dict[str, Any] = {key: {"x-kubernetes-int-or-string": True} for key in known}
        properties.update(typed or {})
        if properties:
            field["properties"] = properties
        field.update({"default": {}, "maxProperties": 64, **immutable("arguments")})

    return Field(default_factory=dict, description=description, json_schema_extra=schema)


def nested(model: type[BaseModel], description: str, **extra: Any) -> Any:
    """A nested object with ``default: {}``, so the apiserver materialises it and its defaults."""
    return Field(
        default_factory=model, description=description, json_schema_extra={"default": {}, **extra}
    )


class CrdModel(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=False
    )


class BrokerRef(CrdModel):
    name: str = Field(min_length=1, max_length=253, description="Name of the Broker.")
    namespace: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        description="Namespace of the Broker; defaults to this object's namespace.",
    )


class SecretRef(CrdModel):
    name: str = Field(
        min_length=1,
        max_length=253,
        description="Secret in this namespace with keys uri (management base URL), "
        "username and password.",
    )


DeletionPolicy = Literal["delete", "retain"]


class ConnectionSpec(CrdModel):
    """How an object reaches its broker: the fields every kind but Broker shares."""

    broker_ref: BrokerRef | None = Field(
        None, description="The Broker (same namespace unless namespace is set) to manage."
    )
    connection_secret: SecretRef | None = Field(
        None, description="Reach any RabbitMQ-compatible broker through this Secret instead."
    )


class TopologySpec(ConnectionSpec):
    """Fields every topology kind shares (docs/contracts/operator.md#common-fields)."""

    vhost: str = Field(
        "/", min_length=1, description="Virtual host.", json_schema_extra=immutable("vhost")
    )
    deletion_policy: DeletionPolicy = Field(
        "delete", description="retain keeps the broker object when this object is deleted."
    )


TOPOLOGY_RULES: list[Any] = [
    rule(
        "has(self.brokerRef) != has(self.connectionSecret)",
        "exactly one of brokerRef and connectionSecret must be set",
    ),
    immutable_optional("brokerRef"),
    immutable_optional("connectionSecret"),
]

NAMED_RULES: list[Any] = [*TOPOLOGY_RULES, immutable_optional("name")]


class Condition(CrdModel):
    """metav1.Condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class TopologyStatus(CrdModel):
    model_config = ConfigDict(extra="allow")

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    conflict_with: str | None = Field(None, description="<namespace>/<name> of the owner.")
    broker_endpoint: str | None = Field(
        None,
        description="The broker's normalised management endpoint: with vhost and name, the key "
        "that conflicting objects are found by, whichever way they reach the broker.",
    )
    declared: bool | None = Field(
        None,
        description="True once this object's declaration into brokerEndpoint succeeded; only "
        "then does deleting it delete the broker object.",
    )
