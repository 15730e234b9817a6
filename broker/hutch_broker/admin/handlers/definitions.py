"""Definitions export and import (API-12), global and per vhost; administrators only."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hutch_broker.admin import auth, bodies, definitions, errors
from hutch_broker.admin.handlers import support

routes = web.RouteTableDef()
THREAD_PARSE_BYTES = 64 * 1024  # a bigger document is parsed and vetted in a worker thread


async def _document(request: web.Request) -> bodies.Body:
    """The body; a big one is parsed off the loop (1 MB: about 60 ms, a pure function)."""
    raw = await request.read()
    if len(raw) <= THREAD_PARSE_BYTES:
        return bodies.parse_json(raw)
    return await asyncio.to_thread(bodies.parse_json, raw)


@routes.get("/api/definitions")
async def export_all(request: web.Request) -> web.StreamResponse:
    auth.require_admin(support.user(request))
    exported = await definitions.export(support.state(request).broker)
    return await support.paced_json_response(request, exported)


@routes.post("/api/definitions")
async def import_all(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    body = await _document(request)
    state = support.state(request)
    await definitions.import_definitions(state.broker, body)
    # An imported permission replaces the user's as PUT /api/permissions does: open
    # connections check against it from now (the import has checked every item's shape).
    for item in body.get("permissions", []):
        state.context.permissions_changed(item["vhost"], item["user"])
    return support.no_content()


@routes.get("/api/definitions/{vhost}")
async def export_vhost(request: web.Request) -> web.StreamResponse:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    name = support.path(request, "vhost")
    if name not in broker.vhosts:
        raise errors.not_found()
    exported = await definitions.export(broker, name)
    return await support.paced_json_response(request, exported)


@routes.post("/api/definitions/{vhost}")
async def import_vhost(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker = support.state(request).broker
    name = support.path(request, "vhost")
    if name not in broker.vhosts:
        raise errors.not_found()
    body = await _document(request)
    await definitions.import_vhost_definitions(broker, body, name)
    return support.no_content()
