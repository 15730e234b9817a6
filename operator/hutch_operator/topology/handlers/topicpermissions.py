"""TopicPermission handlers: one user's routing-key regexes on one topic exchange.

The broker keeps a user's topic permissions in a vhost as one list and deletes them only all
together, so a delete reads the list, deletes it, and puts the other exchanges' entries back
(``tenancy.topic_permission_delete``).
"""

from __future__ import annotations

from typing import Any

from hutch_operator.core import brokerclient, errors, references
from hutch_operator.models import kinds, topicpermissions
from hutch_operator.topology import reconciling, snapshots, tenancy
from hutch_operator.topology.handlers import permissions, registration

Spec = topicpermissions.TopicPermissionSpec


async def _listed(target: references.Target, spec: Spec) -> list[dict[str, Any]]:
    """The user's entries in the vhost ([] when none: the broker answers 404 then)."""
    path = tenancy.topic_permissions_path(spec.vhost, spec.user)
    try:
        listed = await target.client.call(brokerclient.Request("GET", path))
    except errors.ObjectNotFoundError:
        return []
    return [item for item in listed or () if isinstance(item, dict)]


async def declare(target: references.Target, spec: Spec, name: str, owned: bool) -> bool:
    if not owned and not spec.adopt:
        found = tenancy.topic_permission_of(
            await _listed(target, spec), spec.vhost, spec.user, spec.exchange
        )
        if found is not None:
            raise errors.AlreadyExistsError(
                f"topic permission of user {spec.user} on exchange {spec.exchange} in vhost "
                f"{spec.vhost} already exists and was not created by this object: left alone; "
                "set spec.adopt: true to manage it (deleting this object then deletes it)"
            )
    try:
        await target.client.call(tenancy.topic_permission_put(spec))
    except errors.BrokerRejectedError as exc:
        if "not_found" not in str(exc):
            raise
        raise errors.DependencyNotFoundError(await permissions.missing(target, spec)) from exc
    return True


async def delete(target: references.Target, spec: Spec, name: str) -> tuple[str, str] | None:
    listed = await _listed(target, spec)
    if tenancy.topic_permission_of(listed, spec.vhost, spec.user, spec.exchange) is None:
        return None
    for request in tenancy.topic_permission_delete(spec, listed):
        try:
            await target.client.call(request)
        except errors.ObjectNotFoundError:
            continue
    return None


async def observe(target: references.Target, spec: Spec, name: str) -> reconciling.Observation:
    request = brokerclient.Request("GET", "/api/topic-permissions")
    listing = await snapshots.get(target.client, target.key, "topicpermission", request)
    mine = listing.all(vhost=spec.vhost, user=spec.user)
    listed = tenancy.topic_permission_of(mine, spec.vhost, spec.user, spec.exchange)
    if listed is None:
        return reconciling.Observation(missing=True)
    return reconciling.Observation(changed=tenancy.topic_permission_differences(spec, listed))


OPS = reconciling.KindOps(
    kind=kinds.TOPIC_PERMISSION,
    identity=lambda spec, name: ("topic-permission", spec.user, spec.exchange),
    declare=declare,
    delete=delete,
    observe=observe,
    label="topic permission",
)
registration.register(OPS)
