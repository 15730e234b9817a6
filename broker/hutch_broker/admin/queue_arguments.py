"""Hutch extension: change a queue's limit arguments in place (PUT /api/queues/{vh}/{q}/arguments).

Why: RabbitMQ fixes queue arguments at declaration, so changing ``x-max-length`` means deleting
the queue and its messages (or moving the limit to a policy). The operator's Queue ``limits``
must be able to change without that. This endpoint replaces a queue's *limit* arguments only,
and then re-evaluates the queue exactly as a policy change does (POL-7): a lowered max-length
truncates at once (dead-lettering what it drops), a lowered ring size deletes nothing (RING-6),
a new TTL applies to new messages plus a head check, a new ``x-expires`` restarts the lease.

Body: ``{"arguments": {"x-max-length": 10, ...}}``. Keys absent from the body are removed from
the queue (the body is the queue's complete set of limit arguments); other arguments
(``x-single-active-consumer``, ``x-queue-type``, ...) are untouched and may not appear.
Answers: 204 done; 400 ``bad_request`` for a key outside ``LIMIT_ARGUMENTS`` or an invalid value
(the same text as at declaration); 404 for a missing vhost or queue; 400 ``RESOURCE_LOCKED`` for
another connection's exclusive queue. Permission: ``configure`` on the queue, as for a declare.

Wire with ``app.add_routes(queue_arguments.routes)`` (or add the module to ``ROUTE_MODULES``).
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from hutch_broker.admin import auth, bodies, errors
from hutch_broker.admin.handlers import support
from hutch_broker.model import arguments as arguments_mod
from hutch_broker.model.queues import Queue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors as amqp_errors

LIMIT_ARGUMENTS: Final = frozenset(
    {
        "x-max-length",
        "x-max-length-bytes",
        "x-overflow",
        "x-message-ttl",
        "x-expires",
        "x-ring-size",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
    }
)

routes = web.RouteTableDef()


def update_limit_arguments(vhost: VirtualHost, queue: Queue, limits: dict[str, Any]) -> None:
    """Replace ``queue``'s limit arguments by ``limits`` and re-apply its effective settings."""
    unknown = sorted(set(limits) - LIMIT_ARGUMENTS)
    if unknown:
        raise errors.bad_request(
            f"only limit arguments can change in place ({', '.join(sorted(LIMIT_ARGUMENTS))}); "
            f"got {', '.join(unknown)}"
        )
    kept = {k: v for k, v in queue.arguments.items() if k not in LIMIT_ARGUMENTS}
    candidate = {**kept, **limits}
    try:
        arguments_mod.validate_queue_arguments(queue.name, vhost.name, candidate)
    except amqp_errors.AMQPError as exc:
        raise errors.from_amqp(exc) from None
    queue.arguments = candidate
    vhost.apply_policies()  # the same re-evaluation as a policy change (POL-7)
    vhost.on_definitions_changed()  # durable queues keep the new arguments across restarts


@routes.put("/api/queues/{vhost}/{queue}/arguments")
async def put_queue_arguments(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = auth.vhost_for_writing(admin.broker, user, support.path(request, "vhost"))
    queue = vhost.queues.get(support.path(request, "queue"))
    if queue is None:
        raise errors.not_found()
    auth.check(admin.broker, user, vhost.name, "configure", "queue", queue.name)
    try:
        vhost.check_exclusive(queue, None)
    except amqp_errors.AMQPError as exc:
        raise errors.from_amqp(exc) from None
    body = await support.body(request)
    update_limit_arguments(vhost, queue, bodies.table(body, "arguments"))
    admin.context.request_flush()
    return support.no_content()
