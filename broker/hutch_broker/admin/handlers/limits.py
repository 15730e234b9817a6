"""``/api/vhost-limits`` and ``/api/user-limits`` (issue 14): administrator territory.

Thin over ``model/limits.py`` (validation, RabbitMQ's texts) and the broker's setters; the
checks themselves run where connections, channels and queues are opened. Response shapes and
refusals are RabbitMQ 3.10.8's, checked side by side (tests/sidebyside/test_limits_api.py).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from hutch_broker.admin import auth, errors
from hutch_broker.admin.handlers import support
from hutch_broker.model import limits
from hutch_broker.model.broker import Broker

routes = web.RouteTableDef()


def _vhost_items(broker: Broker, only: str | None = None) -> list[dict[str, Any]]:
    return [
        {"vhost": vhost.name, "value": dict(vhost.limits)}
        for vhost in broker.vhosts.values()
        if vhost.limits and only in (None, vhost.name)
    ]


def _user_items(broker: Broker, only: str | None = None) -> list[dict[str, Any]]:
    return [
        {"user": user.name, "value": dict(user.limits)}
        for user in broker.users.values()
        if user.limits and only in (None, user.name)
    ]


async def _value(request: web.Request, kind: limits.Kind, name: str) -> int:
    value = await support.body_value(request)
    try:
        return limits.validate(kind, name, value)
    except limits.LimitError as exc:
        raise errors.bad_request(str(exc)) from None


# -- vhost limits -------------------------------------------------------------------------


@routes.get("/api/vhost-limits")
async def list_vhost_limits(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    return support.json_response(_vhost_items(support.state(request).broker))


@routes.get("/api/vhost-limits/{vhost}")
async def get_vhost_limits(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, name = support.state(request).broker, support.path(request, "vhost")
    if name not in broker.vhosts:
        raise errors.not_found()
    return support.json_response(_vhost_items(broker, name))


@routes.put("/api/vhost-limits/{vhost}/{name}")
async def put_vhost_limit(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, vhost = support.state(request).broker, support.path(request, "vhost")
    name = support.path(request, "name")
    value = await _value(request, "vhost", name)
    if vhost not in broker.vhosts:
        raise errors.vhost_not_found()
    broker.set_vhost_limit(vhost, name, value)
    return support.no_content()


@routes.delete("/api/vhost-limits/{vhost}/{name}")
async def delete_vhost_limit(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, vhost = support.state(request).broker, support.path(request, "vhost")
    if vhost not in broker.vhosts:
        raise errors.vhost_not_found()
    broker.clear_vhost_limit(vhost, support.path(request, "name"))
    return support.no_content()


# -- user limits --------------------------------------------------------------------------


@routes.get("/api/user-limits")
async def list_user_limits(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    return support.json_response(_user_items(support.state(request).broker))


@routes.get("/api/user-limits/{user}")
async def get_user_limits(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, name = support.state(request).broker, support.path(request, "user")
    if name not in broker.users:
        raise errors.not_found()
    return support.json_response(_user_items(broker, name))


@routes.put("/api/user-limits/{user}/{name}")
async def put_user_limit(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, user = support.state(request).broker, support.path(request, "user")
    name = support.path(request, "name")
    value = await _value(request, "user", name)
    if user not in broker.users:
        raise errors.ApiError(400, {"error": "bad_request", "reason": ["no_such_user", user]})
    broker.set_user_limit(user, name, value)
    return support.no_content()


@routes.delete("/api/user-limits/{user}/{name}")
async def delete_user_limit(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, user = support.state(request).broker, support.path(request, "user")
    if user in broker.users:
        broker.clear_user_limit(user, support.path(request, "name"))
    return support.no_content()
