"""Definitions export and import (API-12), global and per vhost; administrators only."""

from __future__ import annotations

from aiohttp import web

from hutch_broker.admin import auth, definitions, errors
from hutch_broker.admin.handlers import support

routes = web.RouteTableDef()


@routes.get("/api/definitions")
async def export_all(request: web.Request) -> web.StreamResponse:
    auth.require_admin(support.user(request))
    return await support.paced_json_response(
        request, support.state(request).broker.export_definitions()
    )


@routes.post("/api/definitions")
async def import_all(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    body = await support.body(request)
    await definitions.import_definitions(support.state(request).broker, body)
    return support.no_content()


@routes.get("/api/definitions/{vhost}")
async def export_vhost(request: web.Request) -> web.StreamResponse:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    name = support.path(request, "vhost")
    if name not in broker.vhosts:
        raise errors.not_found()
    exported = definitions.vhost_export(broker.export_definitions(), name)
    return await support.paced_json_response(request, exported)


@routes.post("/api/definitions/{vhost}")
async def import_vhost(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    name = support.path(request, "vhost")
    if name not in broker.vhosts:
        raise errors.not_found()
    body = await support.body(request)
    await definitions.import_definitions(broker, definitions.scoped_to_vhost(body, name))
    return support.no_content()
