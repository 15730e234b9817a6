"""Pure translators: spec → management-API request, and listed item → differences.

No I/O: every function here is a table test in tests/operator/test_translators.py. Path segments
are encoded with ``quote(s, safe="")`` so ``/`` (the default vhost) becomes ``%2F``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from hutch_operator.core.brokerclient import Request
from hutch_operator.models import bindings, exchanges, policies, queues
from hutch_operator.models.common import same_json

QUEUE_COLUMNS = (
    "name,durable,auto_delete,arguments,messages,messages_ready,messages_unacknowledged,"
    "consumers,policy,operator_policy,effective_policy_definition,first_offset,last_offset,"
    "segments"
)
LIMIT_KEYS = frozenset(queues.LIMIT_ARGUMENTS.values())


def segment(value: str) -> str:
    return quote(value, safe="")


# --- queues ------------------------------------------------------------------------------------


def queue_path(vhost: str, name: str) -> str:
    return f"/api/queues/{segment(vhost)}/{segment(name)}"


def queue_limits(spec: queues.QueueSpec, *, hutch: bool) -> dict[str, Any]:
    """The limit arguments; elsewhere a ring becomes max-length with drop-head."""
    arguments: dict[str, Any] = spec.limits.as_arguments()
    ring = arguments.pop("x-ring-size", None)
    if ring is not None and hutch:
        arguments["x-ring-size"] = ring
    elif ring is not None:
        current = arguments.get("x-max-length")
        arguments["x-max-length"] = ring if current is None else min(current, ring)
        arguments["x-overflow"] = "drop-head"
    return arguments


def queue_arguments(spec: queues.QueueSpec, *, hutch: bool) -> dict[str, Any]:
    arguments: dict[str, Any] = dict(spec.arguments)
    arguments.update(queue_limits(spec, hutch=hutch))
    arguments.update(spec.stream.as_arguments())
    if spec.single_active_consumer:
        arguments["x-single-active-consumer"] = True
    if spec.type != "classic":
        arguments["x-queue-type"] = spec.type
    return arguments


def queue_declare(spec: queues.QueueSpec, name: str, *, hutch: bool) -> Request:
    body = {
        "durable": spec.durable,
        "auto_delete": spec.auto_delete,
        "arguments": queue_arguments(spec, hutch=hutch),
    }
    return Request("PUT", queue_path(spec.vhost, name), body)


def queue_update_limits(spec: queues.QueueSpec, name: str) -> Request:
    """Hutch's in-place extension: replace the queue's limit arguments, keep its messages."""
    body = {"arguments": queue_limits(spec, hutch=True)}
    return Request("PUT", queue_path(spec.vhost, name) + "/arguments", body)


def queue_delete(vhost: str, name: str, *, if_empty: bool, if_unused: bool) -> Request:
    query = []
    if if_empty:
        query.append("if-empty=true")
    if if_unused:
        query.append("if-unused=true")
    suffix = "?" + "&".join(query) if query else ""
    return Request("DELETE", queue_path(vhost, name) + suffix)


def queue_list(vhost: str) -> Request:
    return Request("GET", f"/api/queues/{segment(vhost)}?columns={QUEUE_COLUMNS}")


def queue_differences(
    spec: queues.QueueSpec, listed: dict[str, Any], *, hutch: bool
) -> tuple[list[str], list[str]]:
    """(immutable fields that differ, limit arguments that differ) for a listed queue."""
    desired = queue_arguments(spec, hutch=hutch)
    actual = listed.get("arguments") or {}
    fixed = [
        key
        for key in sorted(set(desired) | set(actual))
        if key not in LIMIT_KEYS and not same_json(desired.get(key), actual.get(key))
    ]
    if listed.get("durable") != spec.durable:
        fixed.append("durable")
    if listed.get("auto_delete") != spec.auto_delete:
        fixed.append("auto_delete")
    limits = [key for key in sorted(LIMIT_KEYS) if not same_json(desired.get(key), actual.get(key))]
    return fixed, limits


def queue_stats(listed: dict[str, Any]) -> dict[str, Any]:
    """Queue status fields from a listed item (RabbitMQ names → camelCase).

    A stream's offsets and segment count are hutch-broker's (docs/contracts/broker.md#st-5):
    RabbitMQ 3.10.8 and other queue types have none, so they stay null (never written)."""
    return {
        "messages": listed.get("messages", 0),
        "messagesReady": listed.get("messages_ready", 0),
        "messagesUnacknowledged": listed.get("messages_unacknowledged", 0),
        "consumers": listed.get("consumers", 0),
        "policy": listed.get("policy") or None,
        "operatorPolicy": listed.get("operator_policy") or None,
        "effectivePolicyDefinition": listed.get("effective_policy_definition") or {},
        "firstOffset": listed.get("first_offset"),
        "lastOffset": listed.get("last_offset"),
        "segments": listed.get("segments"),
    }


# Stats keys whose absence means the same as an empty value: no policy in effect.
POLICY_STATS = frozenset({"policy", "operatorPolicy", "effectivePolicyDefinition"})


def fresh_queue_stats(*, hutch_stream: bool = False) -> dict[str, Any]:
    """The stats of a queue created this instant: no messages, no consumers. Its policy fields
    are not known without a read and are left out (absent means no policy, ``POLICY_STATS``).
    A stream hutch-broker just created starts at offset 0 with no segment and nothing to read
    (docs/contracts/broker.md#st-5), so its offsets are known too."""
    stats: dict[str, Any] = {
        "messages": 0,
        "messagesReady": 0,
        "messagesUnacknowledged": 0,
        "consumers": 0,
    }
    if hutch_stream:
        stats.update(firstOffset=0, lastOffset=None, segments=0)
    return stats


# --- exchanges ---------------------------------------------------------------------------------


def exchange_path(vhost: str, name: str) -> str:
    return f"/api/exchanges/{segment(vhost)}/{segment(name)}"


def exchange_body(spec: exchanges.ExchangeSpec) -> dict[str, Any]:
    return {
        "type": spec.type,
        "durable": spec.durable,
        "auto_delete": spec.auto_delete,
        "internal": spec.internal,
        "arguments": dict(spec.arguments),
    }


def exchange_declare(spec: exchanges.ExchangeSpec, name: str) -> Request:
    return Request("PUT", exchange_path(spec.vhost, name), exchange_body(spec))


def exchange_differences(spec: exchanges.ExchangeSpec, listed: dict[str, Any]) -> list[str]:
    desired = exchange_body(spec)
    listed = {**listed, "arguments": listed.get("arguments") or {}}
    return [key for key, value in desired.items() if not same_json(listed.get(key), value)]


# --- bindings ----------------------------------------------------------------------------------


def binding_collection(spec: bindings.BindingSpec) -> str:
    kind = "q" if spec.destination_type == "queue" else "e"
    return (
        f"/api/bindings/{segment(spec.vhost)}/e/{segment(spec.source)}"
        f"/{kind}/{segment(spec.destination)}"
    )


def binding_create(spec: bindings.BindingSpec) -> Request:
    body = {"routing_key": spec.routing_key, "arguments": dict(spec.arguments)}
    return Request("POST", binding_collection(spec), body)


def binding_matches(spec: bindings.BindingSpec, listed: dict[str, Any]) -> bool:
    return (
        listed.get("source") == spec.source
        and listed.get("destination") == spec.destination
        and listed.get("destination_type") == spec.destination_type
        and listed.get("routing_key", "") == spec.routing_key
        and same_json(listed.get("arguments") or {}, dict(spec.arguments))
    )


def binding_delete(spec: bindings.BindingSpec, properties_key: str) -> Request:
    return Request("DELETE", f"{binding_collection(spec)}/{segment(properties_key)}")


# --- policies ----------------------------------------------------------------------------------


def policy_path(vhost: str, name: str, *, operator: bool) -> str:
    prefix = "/api/operator-policies" if operator else "/api/policies"
    return f"{prefix}/{segment(vhost)}/{segment(name)}"


def policy_body(spec: policies.PolicySpec | policies.OperatorPolicySpec) -> dict[str, Any]:
    return {
        "pattern": spec.pattern,
        "apply-to": spec.apply_to,
        "definition": dict(spec.definition),
        "priority": spec.priority,
    }


def policy_put(
    spec: policies.PolicySpec | policies.OperatorPolicySpec, name: str, *, operator: bool
) -> Request:
    return Request("PUT", policy_path(spec.vhost, name, operator=operator), policy_body(spec))


def policy_differences(
    spec: policies.PolicySpec | policies.OperatorPolicySpec, listed: dict[str, Any]
) -> list[str]:
    desired = policy_body(spec)
    return [key for key, value in desired.items() if not same_json(listed.get(key), value)]
