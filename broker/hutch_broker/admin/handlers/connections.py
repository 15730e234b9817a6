"""Connections and channels (basic fields): who is connected to this broker.

Users see their own connections; monitoring users and administrators see
all of them, as in RabbitMQ.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from hutch_broker.admin import auth, errors
from hutch_broker.admin.handlers import support
from hutch_broker.admin.views import connections as connections_view
from hutch_broker.model import access
from hutch_broker.protocol import errors as amqp_errors

routes = web.RouteTableDef()


def _sessions(request: web.Request, user: access.User, vhost: str | None) -> Iterator[Any]:
    for session in support.state(request).context.sessions.values():
        owner = session.user.name if session.user is not None else None
        if not auth.is_monitor(user) and owner != user.name:
            continue
        if vhost is not None and (session.vhost is None or session.vhost.name != vhost):
            continue
        yield session


async def _connections(request: web.Request, vhost: str | None) -> web.StreamResponse:
    admin = support.state(request)
    found = list(_sessions(request, support.user(request), vhost))
    render = functools.partial(
        connections_view.connection_item, node=admin.node_name, local_address=admin.local_address
    )
    return await support.paced_list_response(request, found, render, ("name",))


async def _channels(request: web.Request, vhost: str | None) -> web.StreamResponse:
    admin = support.state(request)
    found = [
        (session, channel)
        for session in _sessions(request, support.user(request), vhost)
        for channel in list(session.channels.values())
    ]

    def render(pair: tuple[Any, Any]) -> dict[str, Any]:
        return connections_view.channel_item(
            *pair, node=admin.node_name, local_address=admin.local_address
        )

    return await support.paced_list_response(request, found, render, ("name",))


def _known_vhost(request: web.Request) -> str:
    return support.vhost_to_read(request).name


@routes.get("/api/connections")
async def list_connections(request: web.Request) -> web.StreamResponse:
    return await _connections(request, None)


@routes.get("/api/vhosts/{vhost}/connections")
async def list_vhost_connections(request: web.Request) -> web.StreamResponse:
    return await _connections(request, _known_vhost(request))


@routes.get("/api/connections/{name}")
async def get_connection(request: web.Request) -> web.Response:
    admin, wanted = support.state(request), support.path(request, "name")
    for session in _sessions(request, support.user(request), None):
        local_address = session.local_address or admin.local_address
        if connections_view.connection_name(session, local_address) == wanted:
            item = connections_view.connection_item(
                session, node=admin.node_name, local_address=admin.local_address
            )
            return support.item_response(request, item)
    raise errors.not_found()


@routes.delete("/api/connections/{name}")
async def close_connection(request: web.Request) -> web.Response:
    """Force-close an AMQP connection, as RabbitMQ does: connection.close 320 CONNECTION_FORCED
    with the ``X-Reason`` header's text (default "Closed via management plugin"). The owner of
    a connection or an administrator may close it."""
    admin, user = support.state(request), support.user(request)
    wanted = support.path(request, "name")
    for session in list(admin.context.sessions.values()):
        if connections_view.connection_name(session, admin.local_address) != wanted:
            continue
        owner = session.user.name if session.user is not None else None
        if owner != user.name and not auth.is_admin(user):
            raise errors.not_authorized("Not administrator user")
        reason = request.headers.get("X-Reason") or "Closed via management plugin"
        session.fail_connection(amqp_errors.connection_forced(reason))
        admin.context.mark_dirty(session)
        admin.context.request_flush()
        return support.no_content()
    raise errors.not_found()


@routes.get("/api/channels")
async def list_channels(request: web.Request) -> web.StreamResponse:
    return await _channels(request, None)


@routes.get("/api/vhosts/{vhost}/channels")
async def list_vhost_channels(request: web.Request) -> web.StreamResponse:
    return await _channels(request, _known_vhost(request))
