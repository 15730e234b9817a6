"""Management writes: one log line each and a counter per route, for who changed what.

Why: the broker's definitions change only through the management API (the operator, users'
tools, definitions uploads) or AMQP declares, and nothing recorded the HTTP side. An operator
that rewrites objects it already wrote (after a restart, on every sweep) is invisible from its
own metrics, which die with its Pod. This middleware logs every request that can change state
(any method but GET, HEAD, OPTIONS) after its response, with the user, the client's address
(which of two operator Pods wrote, when one replaced the other) and the status, and
counts them by method, route template and status class (bounded label values, unlike paths).
``GET /metrics`` exports the counter as ``hutch_management_writes_total``.

RabbitMQ has no equivalent log by default (its HTTP access log is a file option); the names
here are Hutch's own.
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from hutch_broker.admin.state import STATE, USER

log = logging.getLogger(__name__)

READS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
UNMATCHED: Final = "unmatched"


def route_template(request: web.Request) -> str:
    """``/api/queues/{vhost}/{queue}`` for a matched route; a fixed word otherwise."""
    resource = request.match_info.route.resource
    if resource is None:
        return UNMATCHED
    return resource.canonical.removesuffix("/")  # the slash variant counts as its route


@web.middleware
async def audit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: sees the final status, including the error middleware's refusals."""
    if request.method in READS:
        return await handler(request)
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    finally:
        user = request.get(USER)
        log.info(
            "management %s %s -> %d (user %s from %s)",
            request.method,
            request.raw_path,
            status,
            user.name if user is not None else "-",
            request.remote or "-",
        )
        request.app[STATE].writes.record(request.method, route_template(request), status)
