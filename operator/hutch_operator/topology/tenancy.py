"""Pure translators for the tenancy kinds (Vhost, User, Permission, TopicPermission): spec →
management-API request, listed item → differences, and a User's credentials Secret data.

No I/O, like ``translators`` (table tests in tests/operator/test_tenancy_translators.py). The
password passes through ``user_put`` and ``credentials_data`` only: nothing here returns it in
anything that goes to status, events or logs.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from hutch_operator.core import errors
from hutch_operator.core.brokerclient import Request
from hutch_operator.models import permissions, topicpermissions, users, vhosts
from hutch_operator.topology.translators import segment

AMQP_PORT = 5672

# --- vhosts ------------------------------------------------------------------------------------


def vhost_path(name: str) -> str:
    return f"/api/vhosts/{segment(name)}"


def vhost_put(spec: vhosts.VhostSpec, name: str, *, hutch: bool) -> Request:
    if hutch and spec.default_queue_type not in (None, "classic", "quorum"):
        raise errors.SpecError(
            f"hutch-broker has classic and quorum queues: defaultQueueType "
            f"{spec.default_queue_type} cannot be used"
        )
    body: dict[str, Any] = {"description": spec.description, "tags": list(spec.tags)}
    if spec.default_queue_type is not None:
        body["default_queue_type"] = spec.default_queue_type
    return Request("PUT", vhost_path(name), body)


def vhost_differences(
    spec: vhosts.VhostSpec, listed: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """(mutable fields that differ, immutable ones). RabbitMQ 3.10.8 reports
    ``default_queue_type: undefined`` whatever it was given, so only a concrete other value
    counts as a mismatch."""
    changed = []
    if (listed.get("description") or "") != spec.description:
        changed.append("description")
    if sorted(listed.get("tags") or []) != sorted(spec.tags):
        changed.append("tags")
    actual = listed.get("default_queue_type")
    wanted = spec.default_queue_type
    fixed = []
    if wanted is not None and actual not in (None, "undefined", wanted):
        fixed.append("default_queue_type")
    return changed, fixed


def vhost_queues(name: str) -> Request:
    return Request("GET", f"/api/queues/{segment(name)}?columns=name,messages")


def vhost_contents(listed: list[dict[str, Any]]) -> tuple[int, int]:
    """(queues, messages) of a vhost's queue listing."""
    return len(listed), sum(int(item.get("messages") or 0) for item in listed)


def limit_values(limits: Any) -> dict[str, int]:
    """A Vhost's or User's ``limits`` as the broker names them: ``{"max-queues": 10}``."""
    values = limits.model_dump(exclude_none=True)
    return {key.replace("_", "-"): int(value) for key, value in values.items()}


def listed_limits(listed: Any) -> dict[str, int]:
    """``GET /api/{vhost,user}-limits/{name}`` answers ``[{..., "value": {...}}]`` or ``[]``."""
    items = listed if isinstance(listed, list) else []
    return dict(items[0].get("value") or {}) if items and isinstance(items[0], dict) else {}


def limit_requests(base: str, wanted: dict[str, int], current: dict[str, int]) -> list[Request]:
    """PUT what differs, DELETE what is set but no longer wanted (``base`` ends in the vhost
    or user segment: ``/api/vhost-limits/team-a``)."""
    requests = [
        Request("PUT", f"{base}/{name}", {"value": value})
        for name, value in sorted(wanted.items())
        if current.get(name) != value
    ]
    requests += [Request("DELETE", f"{base}/{name}") for name in sorted(set(current) - set(wanted))]
    return requests


def vhost_limits_path(name: str) -> str:
    return f"/api/vhost-limits/{segment(name)}"


def user_limits_path(name: str) -> str:
    return f"/api/user-limits/{segment(name)}"


# --- users -------------------------------------------------------------------------------------


def user_path(name: str) -> str:
    return f"/api/users/{segment(name)}"


def user_put(spec: users.UserSpec, name: str, password: str) -> Request:
    return Request("PUT", user_path(name), {"password": password, "tags": list(spec.tags)})


def user_differences(spec: users.UserSpec, listed: dict[str, Any]) -> list[str]:
    tags = listed.get("tags") or []
    if isinstance(tags, str):  # older brokers list tags as "a,b"
        tags = [tag for tag in tags.split(",") if tag]
    return [] if sorted(tags) == sorted(spec.tags) else ["tags"]


#: Tags that reach beyond the user's own vhosts: an administrator can grant itself anything,
#: monitoring sees every vhost's connections and queues, impersonator forges user ids.
BROKER_WIDE_TAGS = frozenset({"administrator", "monitoring", "impersonator"})


def broker_wide_tags(spec: users.UserSpec, namespace: str) -> list[str]:
    """The tags a User in ``namespace`` may not have: broker-wide ones, unless it lives in its
    Broker's own namespace (the platform team's). A connectionSecret holder has the broker's
    credentials anyway, so nothing is withheld there."""
    if spec.broker_ref is None or (spec.broker_ref.namespace or namespace) == namespace:
        return []
    return sorted(BROKER_WIDE_TAGS & set(spec.tags))


def credentials_secret_name(user_object: str) -> str:
    return user_object + users.CREDENTIALS_SUFFIX


def amqp_base(management_url: str, amqp_uri: str | None) -> str:
    """``amqp://host:port`` of a broker: its AMQP URL without credentials and vhost, or the
    management URL's host on 5672 when only that is known (a plain connectionSecret)."""
    source = amqp_uri or management_url
    parts = urllib.parse.urlsplit(source)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = parts.port if amqp_uri else AMQP_PORT
    scheme = parts.scheme if amqp_uri else "amqp"
    return f"{scheme}://{host}:{port or AMQP_PORT}"


def amqp_uri(base: str, username: str, password: str, vhost: str) -> str:
    """A URI pika and other clients accept as is: user, password and vhost percent-encoded."""
    scheme, _, rest = base.partition("://")
    user, secret = (urllib.parse.quote(value, safe="") for value in (username, password))
    return f"{scheme}://{user}:{secret}@{rest}/{urllib.parse.quote(vhost, safe='')}"


def credentials_data(username: str, password: str, base: str, vhost: str) -> dict[str, str]:
    """The Secret an application mounts: everything it needs to connect, nothing else."""
    parts = urllib.parse.urlsplit(base)
    return {
        "username": username,
        "password": password,
        "amqp-uri": amqp_uri(base, username, password, vhost),
        "host": parts.hostname or "",
        "amqp-port": str(parts.port or AMQP_PORT),
        "vhost": vhost,
    }


# --- permissions -------------------------------------------------------------------------------


def permission_path(vhost: str, user: str) -> str:
    return f"/api/permissions/{segment(vhost)}/{segment(user)}"


def permission_body(spec: permissions.PermissionSpec) -> dict[str, str]:
    return {"configure": spec.configure, "write": spec.write, "read": spec.read}


def permission_put(spec: permissions.PermissionSpec) -> Request:
    return Request("PUT", permission_path(spec.vhost, spec.user), permission_body(spec))


def permission_differences(spec: permissions.PermissionSpec, listed: dict[str, Any]) -> list[str]:
    return [key for key, value in permission_body(spec).items() if listed.get(key) != value]


# --- topic permissions -------------------------------------------------------------------------


def topic_permissions_path(vhost: str, user: str) -> str:
    return f"/api/topic-permissions/{segment(vhost)}/{segment(user)}"


def topic_permission_body(spec: topicpermissions.TopicPermissionSpec) -> dict[str, str]:
    return {"exchange": spec.exchange, "write": spec.write, "read": spec.read}


def topic_permission_put(spec: topicpermissions.TopicPermissionSpec) -> Request:
    body = topic_permission_body(spec)
    return Request("PUT", topic_permissions_path(spec.vhost, spec.user), body)


def topic_permission_of(
    listed: list[dict[str, Any]], vhost: str, user: str, exchange: str
) -> dict[str, Any] | None:
    """The listed entry for one exchange (a listing holds every exchange's entry)."""
    return next(
        (item for item in listed
         if (item.get("vhost"), item.get("user"), item.get("exchange")) == (vhost, user, exchange)),
        None,
    )  # fmt: skip


def topic_permission_differences(
    spec: topicpermissions.TopicPermissionSpec, listed: dict[str, Any]
) -> list[str]:
    return [key for key in ("write", "read") if listed.get(key) != getattr(spec, key)]


def topic_permission_delete(
    spec: topicpermissions.TopicPermissionSpec, listed: list[dict[str, Any]]
) -> list[Request]:
    """Deleting one exchange's entry. The management API (RabbitMQ 3.10.8 and Hutch alike)
    only deletes *all* of a user's topic permissions in a vhost, so the others are put back
    right after; between the two calls those exchanges are unrestricted for that user."""
    requests = [Request("DELETE", topic_permissions_path(spec.vhost, spec.user))]
    for item in listed:
        if item.get("exchange") == spec.exchange:
            continue
        body = {key: str(item.get(key, "")) for key in ("exchange", "write", "read")}
        requests.append(Request("PUT", topic_permissions_path(spec.vhost, spec.user), body))
    return requests
