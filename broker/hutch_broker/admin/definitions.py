"""``GET/POST /api/definitions[/{vh}]`` (API-12): export, and all-or-nothing import.

The model's importer applies items one by one, so a bad item half-way would
leave a half-imported broker.  An HTTP import therefore validates everything
before it changes anything: first every item's shape, names and keys
(``check``: strings where names go, shortstr lengths as model/names.py says),
then a rehearsal into a scratch ``Broker`` holding a copy of the current
state, including what the export leaves out but an import can collide with:
exclusive queues and server-named ``amq.*`` queues.  Any error in either pass
is a 400 and the real broker is untouched; only then is it imported for real.
Policies are matched once per entity, after the import, a slice per loop turn (the
rehearsal never matches them: no refusal depends on which policy applies), and their
patterns are compiled once, ahead, in a worker thread.
The per-vhost forms use RabbitMQ's vhost export shape: only the vhost's
objects, without ``vhost`` fields, imported into the vhost named in the URL.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Final

from hutch_broker.admin import bodies, errors, slicing
from hutch_broker.model import limits, patterns
from hutch_broker.model.broker import Broker
from hutch_broker.model.queues import Queue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors as amqp_errors

VHOST_SECTIONS: Final = ("parameters", "policies", "queues", "exchanges", "bindings")
_HEADER_KEYS: Final = ("rabbit_version", "rabbitmq_version", "product_name", "product_version")
IMPORT_ERRORS: Final = (ValueError, KeyError, TypeError, AttributeError, re.error)


def vhost_export(full: dict[str, Any], vhost: str) -> dict[str, Any]:
    """The per-vhost export: header keys plus the vhost's sections, ``vhost`` keys removed."""
    result: dict[str, Any] = {key: full[key] for key in _HEADER_KEYS if key in full}
    for section in VHOST_SECTIONS:
        result[section] = [
            {key: value for key, value in item.items() if key != "vhost"}
            for item in full.get(section, [])
            if item.get("vhost") == vhost
        ]
    return result


def scoped_to_vhost(body: dict[str, Any], vhost: str) -> dict[str, Any]:
    """A per-vhost import body as a full one: every item placed in ``vhost``."""
    scoped: dict[str, Any] = {}
    for section in VHOST_SECTIONS:
        items = body.get(section, [])
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise errors.bad_request(f"'{section}' must be a list of objects")
        scoped[section] = [{**item, "vhost": vhost} for item in items]
    return scoped


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing key {exc}"
    return str(exc)


def _apply(broker: Broker, definitions: dict[str, Any]) -> list[VirtualHost]:
    """Import with policy matching deferred; returns the vhosts whose entities must be matched."""
    try:
        return broker.import_definitions(definitions, source="http", defer_policies=True)
    except amqp_errors.AMQPError as exc:
        raise errors.bad_request(errors.detail_of(exc)) from None
    except IMPORT_ERRORS as exc:
        raise errors.bad_request(_reason(exc)) from None


# -- the shape pass --------------------------------------------------------------------------

# section -> (fields that must be strings when present, fields that must be present)
_STRINGS: Final = {
    "vhosts": (("name",), ("name",)),
    "users": (("name", "password_hash"), ("name", "password_hash")),
    "permissions": (
        ("vhost", "user", "configure", "write", "read"),
        ("vhost", "user", "configure", "write", "read"),
    ),
    "topic_permissions": (
        ("vhost", "user", "exchange", "write", "read"),
        ("vhost", "user", "exchange", "write", "read"),
    ),
    "policies": (("vhost", "name"), ("vhost", "name")),
    "parameters": (("vhost", "name", "component"), ()),
    "exchanges": (("vhost", "name", "type"), ("vhost", "name")),
    "queues": (("vhost", "name"), ("vhost", "name")),
    "bindings": (
        ("vhost", "source", "destination", "destination_type", "routing_key"),
        ("vhost", "source", "destination"),
    ),
}
# section -> the string fields that travel as AMQP shortstrs, with their kind of name.
_SHORTSTRS: Final = {
    "policies": (("name", "policy"),),
    "parameters": (("name", "policy"),),
    "exchanges": (("name", "exchange"),),
    "queues": (("name", "queue"),),
    "bindings": (
        ("source", "exchange"),
        ("destination", "destination"),
        ("routing_key", "routing_key"),
    ),
}


def _check_item(section: str, item: dict[str, Any]) -> None:
    strings, required = _STRINGS[section]
    for key in required:
        if key not in item:
            raise errors.bad_request(f"{section}: missing key '{key}'")
    for key in strings:
        if key in item and not isinstance(item[key], str):
            raise errors.bad_request(f"{section}: '{key}' must be a string")
    for key, kind in _SHORTSTRS.get(section, ()):
        if key in item:
            bodies.name(kind, item[key])
    for key in ("arguments", "value", "definition"):
        value = item.get(key)
        if key == "value" and value == [] and item.get("component") == limits.VHOST_COMPONENT:
            continue  # RabbitMQ exports a vhost's cleared limits as its empty proplist, `[]`
        if value is not None and not isinstance(value, dict):
            raise errors.bad_request(f"{section}: '{key}' must be an object")
    if isinstance(item.get("arguments"), dict):
        bodies.named_values(bodies.name_table("arguments", item["arguments"]))
    definition = item.get("definition")
    if isinstance(item.get("value"), dict):
        definition = item["value"].get("definition")
    if isinstance(definition, dict):
        bodies.named_values(definition)


def check(definitions: dict[str, Any]) -> None:
    """Every item's shape, names and keys; a 400 before anything is applied."""
    for section in _STRINGS:
        items = definitions.get(section, [])
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise errors.bad_request(f"'{section}' must be a list of objects")
        for item in items:
            _check_item(section, item)


# -- the rehearsal ------------------------------------------------------------------------


def _hidden_queues(broker: Broker) -> list[tuple[str, Queue]]:
    """Queues the export leaves out or the importer refuses: exclusive and ``amq.*`` ones."""
    return [
        (vhost.name, queue)
        for vhost in broker.vhosts.values()
        for queue in vhost.queues.values()
        if queue.exclusive_owner is not None or queue.name.startswith("amq.")
    ]


def _scratch_copy(broker: Broker) -> Broker:
    """A broker with ``broker``'s definitions, loaded as an import would see them."""
    scratch = Broker(cluster_name=broker.cluster_name)
    scratch.loopback_users = list(broker.loopback_users)
    current = broker.export_definitions()
    hidden = _hidden_queues(broker)
    hidden_names = {(vhost, queue.name) for vhost, queue in hidden}
    current["queues"] = [
        item for item in current["queues"] if (item["vhost"], item["name"]) not in hidden_names
    ]
    hidden_bindings = [
        item
        for item in current["bindings"]
        if item["destination_type"] == "queue"
        and (item["vhost"], item["destination"]) in hidden_names
    ]
    current["bindings"] = [item for item in current["bindings"] if item not in hidden_bindings]
    _apply(scratch, current)
    for vhost_name, queue in hidden:
        stand_in = Queue(
            queue.name,
            vhost=vhost_name,
            durable=queue.durable,
            exclusive_owner=queue.exclusive_owner,
            auto_delete=queue.auto_delete,
            arguments=queue.arguments,
        )
        stand_in.declared_via = queue.declared_via
        scratch.vhosts[vhost_name].queues[queue.name] = stand_in
    _apply(scratch, {"bindings": hidden_bindings})
    return scratch


def rehearse(broker: Broker, definitions: dict[str, Any]) -> None:
    """Import into a scratch copy of ``broker``; raises a 400 if anything fails."""
    scratch = _scratch_copy(broker)
    try:
        _apply(scratch, definitions)
    except errors.ApiError:
        raise
    except Exception as exc:  # noqa: BLE001 - any refusal here must leave the broker untouched
        raise errors.bad_request(_reason(exc) or type(exc).__name__) from None


async def import_definitions(broker: Broker, definitions: dict[str, Any]) -> None:
    check(definitions)
    wanted = _policy_patterns(definitions) + _current_patterns(broker)  # the rehearsal's too
    compiled = await asyncio.to_thread(patterns.compile_ahead, wanted)
    with patterns.precompiled(compiled):
        rehearse(broker, definitions)  # a scratch broker: its paused vhosts are never matched
        paused = _apply(broker, definitions)
    for vhost in paused:
        await slicing.apply_in_slices(vhost.resume_policies())


def _current_patterns(broker: Broker) -> list[str]:
    return [
        policy.pattern
        for vhost in broker.vhosts.values()
        for table in (vhost.policies, vhost.operator_policies)
        for policy in table.values()
    ]


def _policy_patterns(definitions: dict[str, Any]) -> list[str]:
    """The document's policy and operator-policy patterns (``check`` has vetted the shapes)."""
    found = [item.get("pattern") for item in definitions.get("policies", [])]
    for item in definitions.get("parameters", []):
        value = item.get("value")
        if item.get("component") == "operator_policy" and isinstance(value, dict):
            found.append(value.get("pattern"))
    return [pattern for pattern in found if isinstance(pattern, str)]
