"""Queues: declare, inspect, delete, purge and get (API-7, API-8).

The same model calls and permission checks as ``queue.declare``/``delete``/
``purge``/``basic.get``; queues declared here are tagged ``source="http"`` so
an inequivalence error names JSON integers ``long`` as RabbitMQ does.
Exclusive queues belong to their connection and are left alone: deleting,
purging or fetching from one is a 400 ``RESOURCE_LOCKED`` text, as from
another AMQP connection.
"""

from __future__ import annotations

import functools
import itertools

from aiohttp import web

from hutch_broker.admin import auth, bodies, declaring, errors, messaging
from hutch_broker.admin.handlers import support
from hutch_broker.admin.views import bindings as bindings_view
from hutch_broker.admin.views import queues as queues_view
from hutch_broker.model.queues import Queue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors as amqp_errors

routes = web.RouteTableDef()


def _queue(vhost: VirtualHost, name: str) -> Queue:
    queue = vhost.queues.get(name)
    if queue is None:
        raise errors.not_found()
    return queue


def _not_exclusive(vhost: VirtualHost, queue: Queue) -> None:
    vhost.check_exclusive(queue, None)


@routes.get("/api/queues")
async def list_queues(request: web.Request) -> web.StreamResponse:
    admin = support.state(request)
    vhosts = auth.visible_vhosts(admin.broker, support.user(request))
    queues = list(itertools.chain.from_iterable(vhost.queues.values() for vhost in vhosts))
    render = functools.partial(queues_view.queue_item, node=admin.node_name)
    return await support.paced_list_response(request, queues, render, fields=queues_view.FIELDS)


@routes.get("/api/queues/{vhost}")
async def list_vhost_queues(request: web.Request) -> web.StreamResponse:
    admin = support.state(request)
    vhost = support.vhost_to_read(request)
    render = functools.partial(queues_view.queue_item, node=admin.node_name)
    queues = list(vhost.queues.values())
    return await support.paced_list_response(request, queues, render, fields=queues_view.FIELDS)


@routes.get("/api/queues/{vhost}/{queue}")
async def get_queue(request: web.Request) -> web.Response:
    admin = support.state(request)
    vhost = support.vhost_to_read(request)
    queue = _queue(vhost, support.path(request, "queue"))
    item = queues_view.queue_detail(queue, node=admin.node_name, local_address=admin.local_address)
    return support.item_response(request, item)


@routes.put("/api/queues/{vhost}/{queue}")
async def put_queue(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request, creating=True)
    name = bodies.name("queue", support.path(request, "queue"))
    body = await support.body(request)
    durable = bodies.boolean(body, "durable", True)
    auto_delete = bodies.boolean(body, "auto_delete", False)
    arguments = bodies.arguments(body)
    auth.check(admin.broker, user, vhost.name, "configure", "queue", name)
    begin = functools.partial(
        vhost.begin_queue_match,
        name,
        durable=durable,
        auto_delete=auto_delete,
        arguments=arguments,
        default_type=True,
    )
    matched = await declaring.policy_match(begin)  # a slice per loop turn (admin/declaring.py)
    if matched is not None:  # it awaited: the vhost or the permission may have gone meanwhile
        vhost = support.vhost_to_write(request, creating=True)
        auth.check(admin.broker, user, vhost.name, "configure", "queue", name)
    _, created = vhost.declare_queue(
        name,
        durable=durable,
        auto_delete=auto_delete,
        arguments=arguments,
        now_ms=admin.now_ms(),
        source="http",
        default_type=True,
        matched=matched,
    )
    return support.created_or_updated(created)


@routes.put("/api/queues/{vhost}/{queue}/arguments")
async def put_queue_arguments(request: web.Request) -> web.Response:
    """Hutch extension: ``{"arguments": {...}}`` replaces the limit arguments in place.

    Limit arguments (x-max-length, x-max-length-bytes, x-overflow, x-message-ttl, x-expires,
    x-ring-size, x-dead-letter-*) not in the body are removed; other arguments stay. The queue
    keeps its messages; the effects are those of a policy change. Anything else is a 400.
    """
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request)
    queue = _queue(vhost, support.path(request, "queue"))
    body = await support.body(request)
    arguments = bodies.arguments(body)
    auth.check(admin.broker, user, vhost.name, "configure", "queue", queue.name)
    _not_exclusive(vhost, queue)
    vhost.update_queue_limits(queue.name, arguments)
    return support.no_content()


@routes.delete("/api/queues/{vhost}/{queue}")
async def delete_queue(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request)
    queue = _queue(vhost, support.path(request, "queue"))
    auth.check(admin.broker, user, vhost.name, "configure", "queue", queue.name)
    _not_exclusive(vhost, queue)
    if_unused = bodies.query_flag(request.query.get("if-unused"))
    if_empty = bodies.query_flag(request.query.get("if-empty"))
    if (if_unused and queue.consumers) or (if_empty and queue.ready_count):
        vhost.delete_queue(queue.name, if_unused=if_unused, if_empty=if_empty)  # refuses
    await declaring.unlink_in_slices(vhost, queue)  # its bindings, a slice per loop turn
    if vhost.queues.get(queue.name) is queue:  # conditions were checked when it began
        vhost.delete_queue(queue.name)
    return support.no_content()


@routes.delete("/api/queues/{vhost}/{queue}/contents")
async def purge_queue(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request)
    queue = _queue(vhost, support.path(request, "queue"))
    auth.check(admin.broker, user, vhost.name, "read", "queue", queue.name)
    _not_exclusive(vhost, queue)
    queue.purge()
    return support.no_content()


@routes.post("/api/queues/{vhost}/{queue}/get")
async def get_messages(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request)
    queue = _queue(vhost, support.path(request, "queue"))
    get_request = messaging.parse_get(await support.body(request))
    auth.check(admin.broker, user, vhost.name, "read", "queue", queue.name)
    _not_exclusive(vhost, queue)
    try:
        results = messaging.get(queue, get_request, admin.now_ms())
    except amqp_errors.HardError as exc:  # a stream's 540: 3.10.8 puts the code in front
        raise errors.bad_request(f"{exc.reply_code} {errors.detail_of(exc)}") from exc
    admin.context.stats.delivers += len(results)
    admin.context.stats.deliveries["get"] += len(results)
    admin.context.request_flush()
    return support.json_response(results)


@routes.get("/api/queues/{vhost}/{queue}/bindings")
async def queue_bindings(request: web.Request) -> web.Response:
    vhost = support.vhost_to_read(request)
    queue = _queue(vhost, support.path(request, "queue"))
    items = bindings_view.queue_bindings(queue, vhost.name)
    return support.list_response(request, items, default_sort=())
