"""Permission handlers: configure/write/read of one user in one vhost.

A missing user or vhost is ``DependencyNotFound`` naming which one (RabbitMQ answers 400
``vhost_or_user_not_found`` for either), retried soon: GitOps applies a Permission with its
User and Vhost in no particular order.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hutch_operator.core import brokerclient, errors, references
from hutch_operator.models import kinds, permissions
from hutch_operator.topology import reconciling, snapshots, tenancy
from hutch_operator.topology.handlers import registration

Spec = permissions.PermissionSpec


async def declare(target: references.Target, spec: Spec, name: str, owned: bool) -> bool:
    path = tenancy.permission_path(spec.vhost, spec.user)
    what = f"permissions of user {spec.user} in vhost {spec.vhost}"
    await reconciling.refuse_unowned(target, path, what, owned=owned, adopt=spec.adopt)
    try:
        await target.client.call(tenancy.permission_put(spec))
    except (errors.ObjectNotFoundError, errors.BrokerRejectedError) as exc:
        if isinstance(exc, errors.BrokerRejectedError) and "not_found" not in str(exc):
            raise
        raise errors.DependencyNotFoundError(await missing(target, spec)) from exc
    return True


async def missing(target: references.Target, spec: Any) -> str:
    """Which of ``spec.vhost`` and ``spec.user`` the broker lacks (TopicPermission too)."""
    found = []
    for what, path in (("vhost", tenancy.vhost_path(spec.vhost)),
                       ("user", tenancy.user_path(spec.user))):  # fmt: skip
        try:
            await target.client.call(brokerclient.Request("GET", path))
        except errors.ObjectNotFoundError:
            value = spec.vhost if what == "vhost" else spec.user
            found.append(f"{what} {value!r}")
    missing = " and ".join(found) or "vhost or user"
    return f"{missing} not found in the broker (create the Vhost/User first); retrying"


async def delete(target: references.Target, spec: Spec, name: str) -> tuple[str, str] | None:
    with contextlib.suppress(errors.ObjectNotFoundError):
        path = tenancy.permission_path(spec.vhost, spec.user)
        await target.client.call(brokerclient.Request("DELETE", path))
    return None


async def observe(target: references.Target, spec: Spec, name: str) -> reconciling.Observation:
    request = brokerclient.Request("GET", "/api/permissions")
    listing = await snapshots.get(target.client, target.key, "permission", request)
    listed = listing.first(vhost=spec.vhost, user=spec.user)
    if listed is None:
        return reconciling.Observation(missing=True)
    return reconciling.Observation(changed=tenancy.permission_differences(spec, listed))


OPS = reconciling.KindOps(
    kind=kinds.PERMISSION,
    identity=lambda spec, name: ("permission", spec.user),
    declare=declare,
    delete=delete,
    observe=observe,
    label="permission",
)
registration.register(OPS)
