"""``/api/users``, ``/api/whoami`` and ``/api/permissions`` items (API-4).

Users are shown with their stored hash, as RabbitMQ does, because the
definitions round trip (export from one broker, import into another) relies
on it; the password itself is never stored.
"""

from __future__ import annotations

from typing import Any

from hutch_broker.model import access, changes


def user_item(user: access.User) -> dict[str, Any]:
    """GET /api/users items have the definitions export's shape (one builder for both)."""
    return changes.user_item(user)


def whoami(user: access.User) -> dict[str, Any]:
    return {"name": user.name, "tags": list(user.tags)}


def permission_item(vhost: str, user: str, permission: access.Permission) -> dict[str, Any]:
    return changes.permission_item(vhost, user, permission)
