"""Exchanges and HTTP publish (API-5, API-6).

Declares and deletes go through the same model calls and permission checks
as ``exchange.declare``/``exchange.delete``; a refusal comes back with the
AMQP text minus its ``NAME - `` prefix.  Publishing is refused with 503
while the memory alarm is on (MEM-7), as a blocked AMQP publisher would be
held.
"""

from __future__ import annotations

import asyncio
import functools
import itertools

from aiohttp import web

from hutch_broker.admin import auth, bodies, declaring, errors, messaging
from hutch_broker.admin.handlers import support
from hutch_broker.admin.views import bindings as bindings_view
from hutch_broker.admin.views import exchanges as exchanges_view
from hutch_broker.dispatch import publishing, replyto
from hutch_broker.model import publishes
from hutch_broker.model.exchanges import Exchange
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors as amqp_errors

routes = web.RouteTableDef()


def _exchange(vhost: VirtualHost, name: str) -> Exchange:
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        raise errors.not_found()
    return exchange


def _builtin_refusal(vhost: VirtualHost, name: str) -> errors.ApiError | None:
    if name == "":
        return errors.not_authorized(amqp_errors.DEFAULT_EXCHANGE_REFUSAL)
    if name.startswith("amq.") and name in vhost.exchanges:
        return errors.not_authorized(
            f"deletion of system exchange '{name}' in vhost '{vhost.name}' not allowed"
        )
    return None


@routes.get("/api/exchanges")
async def list_exchanges(request: web.Request) -> web.StreamResponse:
    admin = support.state(request)
    vhosts = auth.visible_vhosts(admin.broker, support.user(request))
    found = list(itertools.chain.from_iterable(vhost.exchanges.values() for vhost in vhosts))
    return await support.paced_list_response(
        request, found, exchanges_view.exchange_item, fields=exchanges_view.FIELDS
    )


@routes.get("/api/exchanges/{vhost}")
async def list_vhost_exchanges(request: web.Request) -> web.StreamResponse:
    vhost = support.vhost_to_read(request)
    found = list(vhost.exchanges.values())
    return await support.paced_list_response(
        request, found, exchanges_view.exchange_item, fields=exchanges_view.FIELDS
    )


@routes.get("/api/exchanges/{vhost}/{exchange}")
async def get_exchange(request: web.Request) -> web.Response:
    vhost = support.vhost_to_read(request)
    exchange = _exchange(vhost, support.exchange_path(request, "exchange"))
    return support.item_response(request, exchanges_view.exchange_detail(exchange))


@routes.put("/api/exchanges/{vhost}/{exchange}")
async def put_exchange(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request, creating=True)
    name = bodies.name("exchange", support.exchange_path(request, "exchange"))
    body = await support.body(request)
    kind = bodies.string(body, "type")
    durable = bodies.boolean(body, "durable", True)
    auto_delete = bodies.boolean(body, "auto_delete", False)
    internal = bodies.boolean(body, "internal", False)
    arguments = bodies.arguments(body)
    if name == "":
        raise errors.not_authorized(amqp_errors.DEFAULT_EXCHANGE_REFUSAL)
    auth.check(admin.broker, user, vhost.name, "configure", "exchange", name)
    # The policy search a slice per loop turn (admin/declaring.py).
    matched = await declaring.policy_match(functools.partial(vhost.begin_exchange_match, name))
    if matched is not None:  # it awaited: the vhost or the permission may have gone meanwhile
        vhost = support.vhost_to_write(request, creating=True)
        auth.check(admin.broker, user, vhost.name, "configure", "exchange", name)
    exchange, created = vhost.declare_exchange(
        name,
        kind,
        durable=durable,
        auto_delete=auto_delete,
        internal=internal,
        arguments=arguments,
        matched=matched,
    )
    if created:
        exchange.declared_by = user.name
    return support.created_or_updated(created)


@routes.delete("/api/exchanges/{vhost}/{exchange}")
async def delete_exchange(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request)
    name = support.exchange_path(request, "exchange")
    refusal = _builtin_refusal(vhost, name)
    if refusal is not None:
        raise refusal
    exchange = _exchange(vhost, name)
    auth.check(admin.broker, user, vhost.name, "configure", "exchange", name)
    if_unused = bodies.query_flag(request.query.get("if-unused"))
    if if_unused and (exchange.bindings or exchange.incoming):
        vhost.delete_exchange(name, if_unused=if_unused)  # refuses
    await declaring.unlink_in_slices(vhost, exchange)  # its bindings, a slice per loop turn
    if vhost.exchanges.get(name) is exchange:  # not gone meanwhile (auto-delete)
        vhost.delete_exchange(name)
    return support.no_content()


@routes.post("/api/exchanges/{vhost}/{exchange}/publish")
async def publish(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request)
    name = support.exchange_path(request, "exchange")
    exchange = vhost.exchanges.get(name)
    if exchange is None:  # RabbitMQ answers the channel error it got, as a 400
        raise errors.bad_request(f"404 NOT_FOUND - no exchange '{name}' in vhost '{vhost.name}'")
    message = messaging.parse_publish(await support.body(request))
    auth.check(admin.broker, user, vhost.name, "write", "exchange", exchange.name)
    if exchange.internal:
        raise errors.not_authorized(
            f"cannot publish to internal exchange '{exchange.name}' in vhost '{vhost.name}'"
        )
    messaging.check_user_id(message, user)
    if admin.memory.alarm:
        raise errors.service_unavailable("low on memory")
    context = admin.context
    message_ids = context.next_message_id if context.stamp_message_id else None
    if not exchange.name and message.routing_key.startswith(replyto.PREFIX):
        # A direct reply-to reply: delivered if its requester waits, and reported unrouted
        # either way, as RabbitMQ 3.10.8 does (observed).
        replyto.send_reply(
            context.replies,
            message.routing_key,
            message.raw_properties,
            message.body,
            message_ids=message_ids,
        )
        context.stats.publishes += 1
        return support.json_response({"routed": False})
    published = messaging.publish(
        vhost,
        exchange,
        message,
        admin.now_ms(),
        meter=context.turns.inline_meter(),
        message_ids=message_ids,
    )
    if isinstance(published, publishes.PendingPublish):  # routed over later loop turns
        routed: asyncio.Future[publishes.Published] = asyncio.get_running_loop().create_future()
        later = publishing.RoutedLater(
            published, admin.now_ms, routed.set_result, routed.done, routed.set_exception
        )
        context.turns.park(later)
        published = await routed
    context.stats.publishes += 1
    if published.wrote:
        context.commits.wrote()  # not confirmed (as in RabbitMQ), but synced promptly
    if published.routed:
        context.request_flush()
    return support.json_response({"routed": published.routed})


@routes.get("/api/exchanges/{vhost}/{exchange}/bindings/source")
async def bindings_from(request: web.Request) -> web.StreamResponse:
    return await _exchange_bindings(request, as_source=True)


@routes.get("/api/exchanges/{vhost}/{exchange}/bindings/destination")
async def bindings_to(request: web.Request) -> web.StreamResponse:
    return await _exchange_bindings(request, as_source=False)


async def _exchange_bindings(request: web.Request, *, as_source: bool) -> web.StreamResponse:
    """Paced: the default exchange's source bindings are one per queue of the vhost, and a
    fanout exchange may have as many; ``bindings_view.exchange_bindings``'s order, in slices."""
    vhost = support.vhost_to_read(request)
    exchange = _exchange(vhost, support.exchange_path(request, "exchange"))
    if exchange is vhost.default_exchange and as_source:
        queues = list(vhost.queues.values())
        render = functools.partial(bindings_view.default_binding_item, vhost=vhost.name)
        return await support.paced_list_response(
            request, queues, render, default_sort=(), fields=bindings_view.EDGE_FIELDS
        )
    edges = list(exchange.bindings.values() if as_source else exchange.incoming.values())
    async with support.paced_work(request) as work:
        ordered = await work.pacer.sorted(edges, key=bindings_view.explicit_edge_order)
        render = functools.partial(bindings_view.binding_item, vhost=vhost.name)
        return await support.paced_list(
            request, work, ordered, render, (), fields=bindings_view.EDGE_FIELDS
        )
