"""Topic permissions (``/api/topic-permissions``), as RabbitMQ 3.10.8 serves them.

Why a module of its own: access.py holds vhosts, users and permissions; topic permissions are
a separate table with RabbitMQ's own quirks, kept here: a PUT adds or replaces one exchange's
entry (201 when the user had none in the vhost, else 204), a DELETE clears *all* of the user's
entries in the vhost (3.10.8 has no per-exchange delete and ignores an ``exchange`` given
with it), a vhost or user that does not exist is 400 ``vhost_or_user_not_found``, and a user
with no entries is 404. Patterns are checked as permission patterns are (bounded matcher).
"""

from __future__ import annotations

from aiohttp import web

from hutch_broker.admin import auth, bodies, errors
from hutch_broker.admin.handlers import support
from hutch_broker.model import access, changes
from hutch_broker.model.broker import Broker

routes = web.RouteTableDef()


def _items(
    broker: Broker, *, vhost: str | None = None, user: str | None = None
) -> list[dict[str, object]]:
    return [
        changes.topic_permission_item(vh, name, permission)
        for (vh, name, _), permission in broker.topic_permissions.items()
        if vhost in (None, vh) and user in (None, name)
    ]


def _pattern(body: bodies.Body, key: str) -> str:
    pattern = bodies.string(body, key)
    problem = access.validate_pattern(pattern) if pattern else None
    if problem is not None:
        raise errors.bad_request(f"invalid {key} regular expression '{pattern}': {problem}")
    return pattern


@routes.get("/api/topic-permissions")
async def list_topic_permissions(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    items = _items(support.state(request).broker)
    return support.list_response(request, items, default_sort=("vhost", "user", "exchange"))


@routes.get("/api/topic-permissions/{vhost}/{user}")
async def get_topic_permissions(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    vhost, user = support.path(request, "vhost"), support.path(request, "user")
    items = _items(support.state(request).broker, vhost=vhost, user=user)
    if not items:
        raise errors.not_found()
    return support.list_response(request, items, default_sort=("exchange",))


@routes.put("/api/topic-permissions/{vhost}/{user}")
async def put_topic_permission(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    vhost, user = support.path(request, "vhost"), support.path(request, "user")
    body = await support.body(request)
    for key in ("exchange", "write", "read"):
        bodies.required(body, key)
    exchange = bodies.string(body, "exchange")
    write, read = _pattern(body, "write"), _pattern(body, "read")
    if vhost not in broker.vhosts or user not in broker.users:
        raise errors.bad_request("vhost_or_user_not_found")
    return support.created_or_updated(
        broker.set_topic_permission(vhost, user, exchange, write, read)
    )


@routes.delete("/api/topic-permissions/{vhost}/{user}")
async def delete_topic_permissions(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    vhost, user = support.path(request, "vhost"), support.path(request, "user")
    if not support.state(request).broker.clear_topic_permissions(vhost, user):
        raise errors.not_found()
    return support.no_content()


@routes.get("/api/users/{user}/topic-permissions")
async def user_topic_permissions(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    name = support.path(request, "user")
    if name not in broker.users:
        raise errors.not_found()
    items = _items(broker, user=name)
    return support.list_response(request, items, default_sort=("vhost", "exchange"))


@routes.get("/api/vhosts/{vhost}/topic-permissions")
async def vhost_topic_permissions(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    name = support.path(request, "vhost")
    if name not in broker.vhosts:
        raise errors.not_found()
    items = _items(broker, vhost=name)
    return support.list_response(request, items, default_sort=("user", "exchange"))
