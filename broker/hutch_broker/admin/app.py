"""The aiohttp application: routes, Basic authentication and RabbitMQ's error bodies.

``make_app`` is the only entry point the server needs.  Outermost, the audit
middleware logs and counts every write (``audit``).  Two more wrap every
handler: the outer one turns any refusal (``ApiError``, a model
``AMQPError``, aiohttp's own 404/405) into RabbitMQ's JSON error shape, so
no client ever sees an HTML error page; the inner one refuses writes a
browser sends for another site (``ui.crossorigin``), authenticates every
``/api`` request and leaves ``/metrics`` and the Web UI's files (``ui``) open,
as RabbitMQ does.
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from hutch_broker.admin import audit, auth, errors, metrics, paced
from hutch_broker.admin.handlers import (
    access,
    bindings,
    connections,
    consumers,
    definitions,
    exchanges,
    limits,
    overview,
    parameters,
    policies,
    queues,
    support,
    topicaccess,
)
from hutch_broker.admin.memory import FixedMemory, MemoryMonitor
from hutch_broker.admin.state import STATE, USER, AdminState
from hutch_broker.admin.ui import assets, crossorigin
from hutch_broker.admin.views.overview import NodeInfo
from hutch_broker.dispatch.context import Context
from hutch_broker.protocol import errors as amqp_errors

log = logging.getLogger(__name__)

METRICS_SLOT: Final = "\x00/metrics"  # the listing gate's "user" for scrapes: no real name has NUL
# Definitions files and base64 payloads (16 MiB bodies) are larger than aiohttp's 1 MiB default.
MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024
ROUTE_MODULES: Final = (
    overview,
    access,
    exchanges,
    queues,
    bindings,
    policies,
    definitions,
    connections,
    consumers,
    limits,
    parameters,
    topicaccess,
)


def error_response(exc: errors.ApiError) -> web.Response:
    response = support.json_response(exc.body, status=exc.status)
    if exc.status == 401 and exc.body.get("reason") == "Not_Authorized":
        response.headers["WWW-Authenticate"] = auth.REALM
    return response


def _http_error(exc: web.HTTPException) -> errors.ApiError:
    if isinstance(exc, web.HTTPNotFound):
        return errors.not_found()
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return errors.method_not_allowed(exc.method)
    return errors.ApiError(exc.status, {"error": exc.reason, "reason": exc.text or exc.reason})


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except errors.ApiError as exc:
        return error_response(exc)
    except amqp_errors.AMQPError as exc:
        return error_response(errors.from_amqp(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = error_response(_http_error(exc))
        if isinstance(exc, web.HTTPMethodNotAllowed):
            response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return response
    except Exception:
        log.exception("management API request %s %s failed", request.method, request.path)
        body = {"error": "internal_server_error", "reason": "see the broker log"}
        return support.json_response(body, status=500)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path.startswith("/api/") or request.path == "/api":
        refusal = crossorigin.refusal(
            method=request.method,
            origin=request.headers.get("Origin"),
            fetch_site=request.headers.get("Sec-Fetch-Site"),
            host=request.host,
            scheme=request.scheme,
        )
        if refusal is not None:
            raise errors.ApiError(403, {"error": "forbidden", "reason": refusal})
        state = request.app[STATE]
        request[USER] = auth.authenticate(
            state.broker, request.headers.get("Authorization"), request.remote
        )
    return await handler(request)


async def metrics_endpoint(request: web.Request) -> web.StreamResponse:
    """Open to anybody, so paced, one render at a time and shared by concurrent scrapes
    (``paced.SharedRender``), and sent in pieces that wait for the client."""
    state = request.app[STATE]

    async def render() -> bytes:
        async with state.listings.admit(METRICS_SLOT):
            pacer = paced.Pacer()
            return await metrics.render_paced(state.context, state.memory, state.writes, pacer)

    body = await state.metrics.get(render)
    return await support.send_body(request, body, {"Content-Type": metrics.CONTENT_TYPE})


def make_app(
    context: Context,
    *,
    memory: MemoryMonitor | None = None,
    node: NodeInfo | None = None,
    operator_policy_changes_disabled: bool = False,
    send_stall_s: float = 30.0,
) -> web.Application:
    """The management application for one broker; the server runs it with an AppRunner."""
    app = web.Application(
        middlewares=[audit.audit_middleware, error_middleware, auth_middleware],
        client_max_size=MAX_REQUEST_BYTES,
    )
    app[STATE] = AdminState(
        context=context,
        memory=memory if memory is not None else FixedMemory(),
        node=node if node is not None else NodeInfo(started_at_ms=context.clock()),
        operator_policy_changes_disabled=operator_policy_changes_disabled,
        send_stall_s=send_stall_s,
    )
    for module in ROUTE_MODULES:
        app.add_routes(module.routes)
        app.add_routes(with_trailing_slash(module.routes))
    app.router.add_get("/metrics", metrics_endpoint)
    app.router.add_get("/metrics/", metrics_endpoint)
    assets.add_routes(app)
    return app


def with_trailing_slash(routes: web.RouteTableDef) -> list[web.RouteDef]:
    """Every route again with a trailing slash: RabbitMQ's router ignores one (``/api/queues/``
    is ``/api/queues``), and clients that join path segments rely on it. Routes, not a redirect
    (aiohttp's ``normalize_path_middleware``), because a redirected PUT or DELETE is not
    followed by every client, and RabbitMQ answers such paths directly."""
    return [
        web.RouteDef(route.method, route.path + "/", route.handler, route.kwargs)
        for route in routes
        if isinstance(route, web.RouteDef) and not route.path.endswith("/")
    ]
