"""``/api/consumers`` and ``/api/consumers/{vhost}``: every consumer the caller may see.

rabbitmqadmin's ``list consumers`` and monitoring tools read this list to find stuck or idle
consumers without walking every queue. Each item is the queue detail's ``consumer_details``
entry (the same view), across the vhosts the caller can see, as RabbitMQ lists them.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable

from aiohttp import web

from hutch_broker.admin import auth
from hutch_broker.admin.handlers import support
from hutch_broker.admin.views import queues as queues_view
from hutch_broker.model.vhosts import VirtualHost

routes = web.RouteTableDef()


async def _consumers(request: web.Request, vhosts: Iterable[VirtualHost]) -> web.StreamResponse:
    admin = support.state(request)
    queues = itertools.chain.from_iterable(vhost.queues.values() for vhost in vhosts)
    found = list(itertools.chain.from_iterable(queue.consumers for queue in queues))
    render = functools.partial(
        queues_view.consumer_item, node=admin.node_name, local_address=admin.local_address
    )
    return await support.paced_list_response(request, found, render, default_sort=())


@routes.get("/api/consumers")
async def list_consumers(request: web.Request) -> web.StreamResponse:
    admin = support.state(request)
    vhosts = auth.visible_vhosts(admin.broker, support.user(request))
    return await _consumers(request, vhosts)


@routes.get("/api/consumers/{vhost}")
async def list_vhost_consumers(request: web.Request) -> web.StreamResponse:
    return await _consumers(request, [support.vhost_to_read(request)])
