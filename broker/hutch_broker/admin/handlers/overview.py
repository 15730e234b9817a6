"""Broker-wide endpoints: overview, nodes, whoami, health checks, memory watermark.

Health checks answer 503 with RabbitMQ's body while the memory alarm is on
(API-9); the watermark PUT takes effect at once and is not persisted (MEM-7).
"""

from __future__ import annotations

import os
import resource

from aiohttp import web

from hutch_broker.admin import auth, bodies, errors, memory, messaging
from hutch_broker.admin.handlers import support
from hutch_broker.admin.state import AdminState
from hutch_broker.admin.views import overview as overview_view
from hutch_broker.admin.views import users as users_view
from hutch_broker.model import broker as broker_model
from hutch_broker.protocol import errors as amqp_errors

routes = web.RouteTableDef()


def _fd_counts() -> tuple[int, int]:
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 0
    return used, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def sample(admin: AdminState) -> overview_view.NodeSample:
    """Read the clock and the resource monitor's last sample for ``/api/nodes``."""
    fd_used, fd_total = _fd_counts()
    stats = admin.context.stats
    return overview_view.NodeSample(
        now_ms=admin.now_ms(),
        mem_used=admin.memory.mem_used,
        mem_limit=admin.memory.mem_limit,
        mem_alarm=admin.memory.alarm,
        disk_free=admin.memory.disk_free,
        fd_used=fd_used,
        fd_total=fd_total,
        connections=len(admin.context.sessions),
        connections_opened=stats.connections_opened,
        connections_closed=stats.connections_closed,
    )


@routes.get("/api/overview")
async def get_overview(request: web.Request) -> web.Response:
    admin = support.state(request)
    context = admin.context
    item = overview_view.overview(
        cluster_name=admin.broker.display_cluster_name,
        vhosts=auth.visible_vhosts(admin.broker, support.user(request)),
        stats=context.stats,
        connections=len(context.sessions),
        channels=context.channel_count,
        info=admin.node,
    )
    return support.item_response(request, item)


@routes.get("/api/cluster-name")
async def get_cluster_name(request: web.Request) -> web.Response:
    return support.json_response({"name": support.state(request).broker.display_cluster_name})


@routes.put("/api/cluster-name")
async def put_cluster_name(request: web.Request) -> web.Response:
    """Stored as the ``cluster_name`` global parameter, as RabbitMQ does; nodes keep their names."""
    auth.require_admin(support.user(request))
    body = await support.body(request)
    name = bodies.string(body, "name")
    problem = broker_model.cluster_name_problem(name)
    if problem is not None:
        raise errors.bad_request(problem)
    support.state(request).broker.set_global_parameter("cluster_name", name)
    return support.no_content()


@routes.get("/api/nodes")
async def list_nodes(request: web.Request) -> web.Response:
    auth.require_monitor(support.user(request))
    admin = support.state(request)
    item = overview_view.node(admin.node_name, admin.node, sample(admin))
    return support.list_response(request, [item], default_sort=("name",))


@routes.get("/api/nodes/{node}")
async def get_node(request: web.Request) -> web.Response:
    auth.require_monitor(support.user(request))
    admin = support.state(request)
    if support.path(request, "node") != admin.node_name:
        raise errors.not_found()
    return support.item_response(
        request, overview_view.node(admin.node_name, admin.node, sample(admin))
    )


@routes.get("/api/whoami")
async def whoami(request: web.Request) -> web.Response:
    return support.json_response(users_view.whoami(support.user(request)))


@routes.get("/api/extensions")
async def extensions(request: web.Request) -> web.Response:
    return support.json_response([])


def _active_alarms(admin: AdminState) -> list[str]:
    """The resources in alarm: memory and disk, from the monitor as /api/nodes reports them."""
    alarms = ["memory"] if admin.memory.alarm else []
    if admin.memory.disk_free < admin.node.disk_free_limit:
        alarms.append("disk")
    return alarms


def _alarms_response(admin: AdminState, reason: str) -> web.Response:
    alarms = _active_alarms(admin)
    if not alarms:
        return support.json_response({"status": "ok"})
    body = {
        "status": "failed",
        "reason": reason,
        "alarms": [{"node": admin.node_name, "resource": resource} for resource in alarms],
    }
    return support.json_response(body, status=503)


@routes.get("/api/health/checks/alarms")
async def health_alarms(request: web.Request) -> web.Response:
    admin = support.state(request)
    return _alarms_response(admin, "There are alarms in effect in the cluster")


@routes.get("/api/health/checks/local-alarms")
async def health_local_alarms(request: web.Request) -> web.Response:
    admin = support.state(request)
    return _alarms_response(admin, "There are alarms in effect on the node")


@routes.get("/api/aliveness-test/{vhost}")
async def aliveness_test(request: web.Request) -> web.Response:
    admin = support.state(request)
    user = support.user(request)
    vhost = support.vhost_to_write(request)
    auth.check(admin.broker, user, vhost.name, "configure", "queue", messaging.ALIVENESS_QUEUE)
    auth.check(admin.broker, user, vhost.name, "write", "exchange", "")
    auth.check(admin.broker, user, vhost.name, "read", "queue", messaging.ALIVENESS_QUEUE)
    try:
        alive = messaging.aliveness(vhost, admin.now_ms())
    except amqp_errors.AMQPError as exc:
        body = {"status": "failed", "reason": errors.detail_of(exc)}
        return support.json_response(body, status=503)
    if not alive:
        return support.json_response({"status": "failed", "reason": "no message"}, status=503)
    return support.json_response({"status": "ok"})


@routes.get("/api/vm-memory-high-watermark")
async def get_watermark(request: web.Request) -> web.Response:
    auth.require_monitor(support.user(request))
    monitor = support.state(request).memory
    return support.json_response({**monitor.settings_json(), "mem_limit": monitor.mem_limit})


@routes.put("/api/vm-memory-high-watermark")
async def put_watermark(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    setting = memory.parse_watermark(await support.body(request))
    try:
        support.state(request).memory.set_watermark(setting)
    except ValueError as exc:
        raise errors.bad_request(str(exc)) from None
    return support.no_content()
