"""Bindings (API-10): list, create with a ``Location``, inspect and delete by ``properties_key``.

Creating a binding needs write permission on the destination and read
permission on the source, as ``queue.bind``/``exchange.bind`` do.
"""

from __future__ import annotations

import urllib.parse

from aiohttp import web

from hutch_broker.admin import auth, bodies, errors, paced
from hutch_broker.admin.handlers import support
from hutch_broker.admin.views import bindings as bindings_view
from hutch_broker.model.exchanges import Binding, Exchange
from hutch_broker.model.queues import Queue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors as amqp_errors

routes = web.RouteTableDef()
EDGE = "/api/bindings/{vhost}/e/{source}/{dtype:[qe]}/{destination}"

Destination = Queue | Exchange


def _kind(request: web.Request) -> str:
    return "exchange" if support.path(request, "dtype") == "e" else "queue"


def _ends(request: web.Request, vhost: VirtualHost) -> tuple[Exchange, Destination]:
    """The source exchange and the destination; 404 if either is missing."""
    source = vhost.exchanges.get(support.exchange_path(request, "source"))
    kind = _kind(request)
    name = (
        support.exchange_path(request, "destination")
        if kind == "exchange"
        else support.path(request, "destination")
    )
    destination = vhost.exchanges.get(name) if kind == "exchange" else vhost.queues.get(name)
    if source is None or destination is None:
        raise errors.not_found()
    return source, destination


def _edge_items(
    vhost: VirtualHost, source: Exchange, destination: Destination
) -> list[dict[str, object]]:
    if source is vhost.default_exchange:
        if isinstance(destination, Queue):
            return [bindings_view.default_binding_item(destination, vhost.name)]
        return []
    return [
        bindings_view.binding_item(binding, vhost.name)
        for binding in bindings_view.between(source, destination)
    ]


def _location(request: web.Request, binding: Binding, vhost: str) -> str:
    def quote(value: str) -> str:
        return urllib.parse.quote(value, safe="")

    key = bindings_view.properties_key(binding.routing_key, binding.arguments)
    source = binding.source.name or support.DEFAULT_EXCHANGE_PATH
    return (
        f"/api/bindings/{quote(vhost)}/e/{quote(source)}/{support.path(request, 'dtype')}/"
        f"{quote(binding.destination.name)}/{key}"
    )


@routes.get("/api/bindings")
async def list_bindings(request: web.Request) -> web.StreamResponse:
    admin = support.state(request)
    vhosts = auth.visible_vhosts(admin.broker, support.user(request))
    async with support.paced_work(request) as work:
        edges: list[Queue | Binding] = []
        for vhost in vhosts:
            edges.extend(await _vhost_edges(vhost, work.pacer))
        return await support.paced_list(
            request, work, edges, bindings_view.edge_item, (), fields=bindings_view.EDGE_FIELDS
        )


@routes.get("/api/bindings/{vhost}")
async def list_vhost_bindings(request: web.Request) -> web.StreamResponse:
    vhost = support.vhost_to_read(request)
    async with support.paced_work(request) as work:
        edges = await _vhost_edges(vhost, work.pacer)
        return await support.paced_list(
            request, work, edges, bindings_view.edge_item, (), fields=bindings_view.EDGE_FIELDS
        )


async def _vhost_edges(vhost: VirtualHost, pacer: paced.Pacer) -> list[Queue | Binding]:
    """``bindings_view.vhost_bindings``'s order, in slices, as model objects: a queue stands
    for its implicit default-exchange binding. Sorted by keys read from the objects, not from
    rendered items, so that a page of 500 out of 110,000 renders 500 items, not 110,000."""
    queues = [queue for queue in list(vhost.queues.values()) if not queue.deleted]
    implicit = await pacer.sorted(queues, key=bindings_view.implicit_edge_order)
    explicit = await pacer.sorted(vhost.bindings(), key=bindings_view.explicit_edge_order)
    return [*implicit, *explicit]


@routes.get(EDGE)
async def list_edge(request: web.Request) -> web.Response:
    vhost = support.vhost_to_read(request)
    source, destination = _ends(request, vhost)
    return support.list_response(request, _edge_items(vhost, source, destination), default_sort=())


@routes.post(EDGE)
async def create_binding(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request, creating=True)
    source, destination = _ends(request, vhost)
    body = await support.body(request)
    routing_key = bodies.name("routing_key", bodies.string(body, "routing_key", ""))
    arguments = bodies.arguments(body)
    auth.check(admin.broker, user, vhost.name, "write", _kind(request), destination.name)
    auth.check(admin.broker, user, vhost.name, "read", "exchange", source.name)
    binding = vhost.bind(source.name, destination, routing_key, arguments)
    return web.Response(status=201, headers={"Location": _location(request, binding, vhost.name)})


@routes.get(EDGE + "/{props}")
async def get_binding(request: web.Request) -> web.Response:
    vhost = support.vhost_to_read(request)
    source, destination = _ends(request, vhost)
    given = support.path(request, "props")
    for item in _edge_items(vhost, source, destination):
        if bindings_view.key_matches(given, str(item["properties_key"])):
            return support.item_response(request, item)
    raise errors.not_found()


@routes.delete(EDGE + "/{props}")
async def delete_binding(request: web.Request) -> web.Response:
    admin, user = support.state(request), support.user(request)
    vhost = support.vhost_to_write(request)
    source, destination = _ends(request, vhost)
    if source is vhost.default_exchange:
        raise errors.not_authorized(amqp_errors.DEFAULT_EXCHANGE_REFUSAL)
    binding = bindings_view.find(
        bindings_view.between(source, destination), support.path(request, "props")
    )
    if binding is None:
        raise errors.not_found()
    auth.check(admin.broker, user, vhost.name, "write", _kind(request), destination.name)
    auth.check(admin.broker, user, vhost.name, "read", "exchange", source.name)
    vhost.unbind(source.name, destination, binding.routing_key, binding.arguments)
    return support.no_content()
