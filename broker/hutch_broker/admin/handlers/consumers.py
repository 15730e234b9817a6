"""``/api/consumers`` and ``/api/consumers/{vhost}``: every consumer the caller may see.

rabbitmqadmin's ``list consumers`` and monitoring tools read this list to find stuck or idle
consumers without walking every queue. Each item is the queue detail's ``consumer_details``
entry (the same view), across the vhosts the caller can see, as RabbitMQ lists them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiohttp import web

from hutch_broker.admin import auth
from hutch_broker.admin.handlers import support
from hutch_broker.admin.views import queues as queues_view
from hutch_broker.model.vhosts import VirtualHost

routes = web.RouteTableDef()


def _consumer_items(request: web.Request, vhosts: Iterable[VirtualHost]) -> list[dict[str, Any]]:
    admin = support.state(request)
    return [
        queues_view.consumer_item(consumer, node=admin.node_name, local_address=admin.local_address)
        for vhost in vhosts
        for queue in vhost.queues.values()
        for consumer in queue.consumers
    ]


@routes.get("/api/consumers")
async def list_consumers(request: web.Request) -> web.Response:
    admin = support.state(request)
    vhosts = auth.visible_vhosts(admin.broker, support.user(request))
    return support.list_response(request, _consumer_items(request, vhosts), default_sort=())


@routes.get("/api/consumers/{vhost}")
async def list_vhost_consumers(request: web.Request) -> web.Response:
    vhosts = [support.vhost_to_read(request)]
    return support.list_response(request, _consumer_items(request, vhosts), default_sort=())
