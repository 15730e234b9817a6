"""Vhosts, users and permissions (API-3, API-4): administrator territory.

Creating a vhost over HTTP gives its creator full permissions in it, as
RabbitMQ does, so an operator that creates a vhost can use it at once.
"""

from __future__ import annotations

import functools

from aiohttp import web

from hutch_broker.admin import auth, bodies, errors
from hutch_broker.admin.handlers import support
from hutch_broker.admin.views import users as users_view
from hutch_broker.admin.views import vhosts as vhosts_view
from hutch_broker.model import access
from hutch_broker.model.broker import FULL_ACCESS, Broker

routes = web.RouteTableDef()


# -- vhosts -------------------------------------------------------------------------------


@routes.get("/api/vhosts")
async def list_vhosts(request: web.Request) -> web.StreamResponse:
    """Each item sums over its vhost's queues: paced, one vhost per step."""
    admin = support.state(request)
    vhosts = list(auth.visible_vhosts(admin.broker, support.user(request)))
    render = functools.partial(vhosts_view.vhost_list_item, node=admin.node_name)
    return await support.paced_list_response(request, vhosts, render, default_sort=("name",))


@routes.get("/api/vhosts/{vhost}")
async def get_vhost(request: web.Request) -> web.Response:
    admin = support.state(request)
    vhost = support.vhost_to_read(request)
    return support.item_response(request, vhosts_view.vhost_item(vhost, node=admin.node_name))


@routes.put("/api/vhosts/{vhost}")
async def put_vhost(request: web.Request) -> web.Response:
    user = support.user(request)
    auth.require_admin(user)
    body = await support.body(request)
    description = bodies.string(body, "description", "")
    # A PUT replaces the metadata, as RabbitMQ 3.10.8's does: absent keys become "" and [].
    tags = bodies.tags(body["tags"]) if "tags" in body else []
    queue_type = bodies.string(body, "default_queue_type", "") or None  # absent: kept
    broker = support.state(request).broker
    name = support.path(request, "vhost")
    _, created = broker.add_vhost(
        name,
        description=description,
        tags=tags,
        default_queue_type="classic" if queue_type == "undefined" else queue_type,
        replace_metadata=True,
    )
    if created:
        broker.set_permission(name, user.name, *FULL_ACCESS)
    return support.created_or_updated(created)


@routes.delete("/api/vhosts/{vhost}")
async def delete_vhost(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    state, name = support.state(request), support.path(request, "vhost")
    if not state.broker.delete_vhost(name):
        raise errors.not_found()
    state.context.close_sessions(f"vhost '{name}' is deleted", vhost=name)
    return support.no_content()


@routes.get("/api/vhosts/{vhost}/permissions")
async def vhost_permissions(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    name = support.path(request, "vhost")
    if name not in broker.vhosts:
        raise errors.not_found()
    return support.list_response(request, _permission_items(broker, vhost=name), ("user",))


# -- users --------------------------------------------------------------------------------


def _password_hash(body: bodies.Body, existing: access.User | None) -> str:
    if "password" in body and body["password"] is not None:
        return access.hash_password(bodies.string(body, "password"))
    if "password_hash" in body and body["password_hash"] is not None:
        algorithm = bodies.string(body, "hashing_algorithm", access.HASHING_ALGORITHM)
        if algorithm != access.HASHING_ALGORITHM:
            raise errors.bad_request(f"unsupported hashing algorithm '{algorithm}'")
        return bodies.string(body, "password_hash")
    return existing.password_hash if existing is not None else ""


@routes.get("/api/users")
async def list_users(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    users = support.state(request).broker.users.values()
    return support.list_response(request, [users_view.user_item(u) for u in users], ("name",))


@routes.get("/api/users/{user}")
async def get_user(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    found = support.state(request).broker.users.get(support.path(request, "user"))
    if found is None:
        raise errors.not_found()
    return support.item_response(request, users_view.user_item(found))


@routes.put("/api/users/{user}")
async def put_user(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    body = await support.body(request)
    broker = support.state(request).broker
    name = support.path(request, "user")
    existing = broker.users.get(name)
    password_hash = _password_hash(body, existing)
    if "tags" in body:
        tags = bodies.tags(body["tags"])
    else:
        tags = list(existing.tags) if existing is not None else []
    return support.created_or_updated(broker.put_user(name, password_hash, tags))


@routes.delete("/api/users/{user}")
async def delete_user(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    state, name = support.state(request), support.path(request, "user")
    if not state.broker.delete_user(name):
        raise errors.not_found()
    state.context.close_sessions(f"user '{name}' was deleted", user=name)
    return support.no_content()


@routes.get("/api/users/{user}/permissions")
async def user_permissions(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    name = support.path(request, "user")
    if name not in broker.users:
        raise errors.not_found()
    return support.list_response(request, _permission_items(broker, user=name), ("vhost",))


# -- permissions --------------------------------------------------------------------------


def _permission_items(
    broker: Broker, *, vhost: str | None = None, user: str | None = None
) -> list[dict[str, object]]:
    return [
        users_view.permission_item(vh, name, permission)
        for (vh, name), permission in broker.permissions.items()
        if vhost in (None, vh) and user in (None, name)
    ]


def _pattern(body: bodies.Body, key: str) -> str:
    pattern = bodies.string(body, key)
    problem = access.validate_pattern(pattern)
    if problem is not None:
        raise errors.bad_request(f"invalid {key} regular expression '{pattern}': {problem}")
    return pattern


@routes.get("/api/permissions")
async def list_permissions(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    items = _permission_items(support.state(request).broker)
    return support.list_response(request, items, default_sort=("vhost", "user"))


@routes.get("/api/permissions/{vhost}/{user}")
async def get_permission(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    vhost, user = support.path(request, "vhost"), support.path(request, "user")
    permission = support.state(request).broker.permission(vhost, user)
    if permission is None:
        raise errors.not_found()
    return support.item_response(request, users_view.permission_item(vhost, user, permission))


@routes.put("/api/permissions/{vhost}/{user}")
async def put_permission(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    vhost, user = support.path(request, "vhost"), support.path(request, "user")
    body = await support.body(request)
    configure, write, read = (_pattern(body, key) for key in ("configure", "write", "read"))
    if vhost not in broker.vhosts or user not in broker.users:
        raise errors.bad_request("vhost_or_user_not_found")  # RabbitMQ 3.10.8's answer
    created = broker.set_permission(vhost, user, configure, write, read)
    support.state(request).context.permissions_changed(vhost, user)
    return support.created_or_updated(created)


@routes.delete("/api/permissions/{vhost}/{user}")
async def delete_permission_route(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    vhost, user = support.path(request, "vhost"), support.path(request, "user")
    if not broker.delete_permission(vhost, user):
        raise errors.not_found()
    support.state(request).context.permissions_changed(vhost, user)
    return support.no_content()
