"""User handlers: the broker user, its password from (or into) a Secret, tags, rotation.

Declare sends the password the credentials Secret holds, so a changed Secret (found by the
sweep through its resourceVersion, there being no Secret watch) rotates it. The operator never
reads the broker's password hash back: drift is judged on tags and existence only.
"""

from __future__ import annotations

import contextlib

from hutch_operator.core import brokerclient, config, errors, references
from hutch_operator.models import kinds, users
from hutch_operator.topology import reconciling, snapshots, tenancy, usersecrets
from hutch_operator.topology.handlers import registration, vhosts

Spec = users.UserSpec


async def declare(target: references.Target, spec: Spec, name: str, owned: bool) -> bool:
    if name == target.client.username:
        raise errors.SpecError(
            f"user {name} is the one the operator manages this broker with: choose another name"
        )
    subject = reconciling.subject()
    withheld = tenancy.broker_wide_tags(spec, subject.namespace)
    if withheld:
        raise errors.NamespaceNotAllowedError(
            f"tags {', '.join(withheld)} reach every vhost of the broker: only Users in the "
            "Broker's own namespace may have them"
        )
    await reconciling.refuse_unowned(
        target, tenancy.user_path(name), f"user {name}", owned=owned, adopt=spec.adopt
    )
    base = await _amqp_base(target, spec, subject.namespace)
    owner = (subject.namespace, subject.name, subject.uid)
    credentials = await usersecrets.ensure(owner, spec, name, base)
    await target.client.call(tenancy.user_put(spec, name, credentials.password))
    await vhosts.apply_limits(
        target, tenancy.user_limits_path(name), tenancy.limit_values(spec.limits)
    )
    subject.patch.status["credentialsSecret"] = credentials.secret
    subject.patch.status["credentialsVersion"] = credentials.version
    return True


async def _amqp_base(target: references.Target, spec: Spec, namespace: str) -> str:
    """The broker's AMQP address for the URI applications get."""
    if spec.broker_ref is not None:
        ref = spec.broker_ref
        tls = target.client.base_url.startswith("https://")  # the Broker has spec.tls
        address = config.broker_address(ref.namespace or namespace, ref.name, tls=tls)
        return tenancy.amqp_base(address.management, address.amqp)
    secret = spec.connection_secret.name if spec.connection_secret else ""
    data = await references.read_secret(namespace, secret) or {}
    return tenancy.amqp_base(target.client.base_url, data.get("amqp-uri"))


async def delete(target: references.Target, spec: Spec, name: str) -> tuple[str, str] | None:
    """The broker closes the user's connections; the Secret goes with the User (owner ref)."""
    with contextlib.suppress(errors.ObjectNotFoundError):
        await target.client.call(brokerclient.Request("DELETE", tenancy.user_path(name)))
    return None


async def observe(target: references.Target, spec: Spec, name: str) -> reconciling.Observation:
    subject = reconciling.subject()
    current = await usersecrets.version(subject.namespace, spec, subject.name)
    request = brokerclient.Request("GET", "/api/users")
    listing = await snapshots.get(target.client, target.key, "user", request)
    listed = listing.first(name=name)
    if listed is None:
        return reconciling.Observation(missing=True)
    changed = tenancy.user_differences(spec, listed)
    request = brokerclient.Request("GET", "/api/user-limits")
    limits = await snapshots.get(target.client, target.key, "user-limits", request)
    applied = tenancy.listed_limits(limits.all(user=name))
    if applied != tenancy.limit_values(spec.limits):
        changed.append("limits")
    if current != subject.status.get("credentialsVersion"):
        changed.append("password (its Secret changed)")
    return reconciling.Observation(changed=changed)


OPS = reconciling.KindOps(
    kind=kinds.USER,
    identity=lambda spec, name: ("user", name),
    declare=declare,
    delete=delete,
    observe=observe,
    label="user",
)
registration.register(OPS)
