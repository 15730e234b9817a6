"""Runtime parameters: ``/api/parameters`` and ``/api/global-parameters`` (issue 14).

Why: RabbitMQ keeps operator policies and vhost limits as vhost-scoped runtime parameters, and
tools (rabbitmqadmin, definitions exports, the topology operator) read and write them through
this generic API. Hutch has the two components RabbitMQ 3.10.8 has without plugins,
``operator_policy`` and ``vhost-limits``; each is a view onto the same model the dedicated
endpoints change (``/api/operator-policies``, ``/api/vhost-limits``), so the two ways never
disagree. Any other component is refused as RabbitMQ refuses it (federation and shovel are
plugins Hutch does not have). Global parameters are free-form JSON values; ``cluster_name``
names the cluster in ``/api/overview``, as in RabbitMQ.
"""

from __future__ import annotations

import html
from typing import Any

from aiohttp import web

from hutch_broker.admin import auth, errors, slicing
from hutch_broker.admin.handlers import support
from hutch_broker.admin.handlers.policies import parse_off_loop
from hutch_broker.model import changes, limits
from hutch_broker.model.broker import Broker, cluster_name_problem
from hutch_broker.model.policies import erlang_term
from hutch_broker.model.vhosts import VirtualHost

routes = web.RouteTableDef()

OPERATOR_POLICY = "operator_policy"
COMPONENTS = (OPERATOR_POLICY, limits.VHOST_COMPONENT)


def _items(
    broker: Broker, component: str | None = None, vhost: str | None = None
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for each in broker.vhosts.values():
        if vhost not in (None, each.name):
            continue
        if component in (None, OPERATOR_POLICY):
            found += [
                changes.operator_policy_item(each.name, policy)
                for policy in each.operator_policies.values()
            ]
        if component in (None, limits.VHOST_COMPONENT) and each.limits:
            found.append(changes.vhost_limits_item(each))
    return found


def _vhost(broker: Broker, name: str) -> VirtualHost:
    vhost = broker.vhosts.get(name)
    if vhost is None:
        raise errors.vhost_not_found()
    return vhost


# -- vhost-scoped parameters ----------------------------------------------------------------


@routes.get("/api/parameters")
async def list_parameters(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    return support.list_response(request, _items(support.state(request).broker))


@routes.get("/api/parameters/{component}")
async def list_component(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, component = support.state(request).broker, support.path(request, "component")
    return support.list_response(request, _items(broker, component))


@routes.get("/api/parameters/{component}/{vhost}")
async def list_component_vhost(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, vhost = support.state(request).broker, support.path(request, "vhost")
    if vhost not in broker.vhosts:
        raise errors.not_found()
    items = _items(broker, support.path(request, "component"), vhost)
    return support.list_response(request, items)


@routes.get("/api/parameters/{component}/{vhost}/{name}")
async def get_parameter(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, name = support.state(request).broker, support.path(request, "name")
    component, vhost = support.path(request, "component"), support.path(request, "vhost")
    for item in _items(broker, component, vhost):
        if item["name"] == name:
            return support.item_response(request, item)
    raise errors.not_found()


@routes.put("/api/parameters/{component}/{vhost}/{name}")
async def put_parameter(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, name = support.state(request).broker, support.path(request, "name")
    component = support.path(request, "component")
    if component == "policy":
        raise errors.bad_request("policies may not be set using this method")
    if component not in COMPONENTS:
        raise errors.validation_failed(f"component {component} not found")
    value = await support.body_value(request)
    vhost = _vhost(broker, support.path(request, "vhost"))
    if component == OPERATOR_POLICY:
        support.require_operator_policy_changes(request)
        return await _put_operator_policy(vhost, name, value)
    return _put_vhost_limits(broker, vhost, name, value)


async def _put_operator_policy(vhost: VirtualHost, name: str, value: Any) -> web.Response:
    if isinstance(value, dict):
        for key in ("pattern", "definition", "priority"):
            if key not in value:
                raise errors.validation_failed(f'Key "{key}" not found in {name}')
    policy = await parse_off_loop(value, vhost=vhost.name, name=name, operator=True)
    created = name not in vhost.operator_policies
    await slicing.apply_in_slices(vhost.change_policy(name, policy, operator=True))
    return support.created_or_updated(created)


def _put_vhost_limits(broker: Broker, vhost: VirtualHost, name: str, value: Any) -> web.Response:
    if name != limits.VHOST_PARAMETER:  # RabbitMQ 3.10.8 crashes (500) on any other name
        raise errors.validation_failed(f"vhost limits are the parameter named 'limits', not {name}")
    if value == []:  # RabbitMQ's empty proplist: how its exports show cleared limits
        value = {}
    if not isinstance(value, dict):
        raise errors.validation_failed(f"limits not a list {erlang_term(value)}")
    try:
        values = limits.validate_all("vhost", value)
    except limits.LimitError as exc:
        # This path of RabbitMQ's escapes its reason as HTML; tools see the same bytes here.
        raise errors.bad_request(html.escape(str(exc), quote=False)) from None
    return support.created_or_updated(broker.replace_vhost_limits(vhost.name, values))


@routes.delete("/api/parameters/{component}/{vhost}/{name}")
async def delete_parameter(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    broker, name = support.state(request).broker, support.path(request, "name")
    component = support.path(request, "component")
    vhost = broker.vhosts.get(support.path(request, "vhost"))
    if vhost is None:
        raise errors.not_found()
    if component == OPERATOR_POLICY:
        support.require_operator_policy_changes(request)
    if component == OPERATOR_POLICY and name in vhost.operator_policies:
        await slicing.apply_in_slices(vhost.change_policy(name, None, operator=True))
        return support.no_content()
    if component == limits.VHOST_COMPONENT and name == limits.VHOST_PARAMETER and vhost.limits:
        broker.replace_vhost_limits(vhost.name, {})
        return support.no_content()
    raise errors.not_found()


# -- global parameters ---------------------------------------------------------------------


def _global_item(name: str, value: Any) -> dict[str, Any]:
    return {"name": name, "value": value}


@routes.get("/api/global-parameters")
async def list_global(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    found = support.state(request).broker.global_parameters
    items = [_global_item(name, value) for name, value in found.items()]
    return support.list_response(request, items, default_sort=("name",))


@routes.get("/api/global-parameters/{name}")
async def get_global(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    found, name = support.state(request).broker.global_parameters, support.path(request, "name")
    if name not in found:
        raise errors.not_found()
    return support.item_response(request, _global_item(name, found[name]))


@routes.put("/api/global-parameters/{name}")
async def put_global(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    value = await support.body_value(request)
    broker, name = support.state(request).broker, support.path(request, "name")
    problem = (
        cluster_name_problem(value) if name == "cluster_name" and isinstance(value, str) else None
    )
    if problem is not None:
        raise errors.bad_request(problem)
    created = broker.set_global_parameter(name, value)
    return support.created_or_updated(created)


@routes.delete("/api/global-parameters/{name}")
async def delete_global(request: web.Request) -> web.Response:
    auth.require_admin(support.user(request))
    if not support.state(request).broker.delete_global_parameter(support.path(request, "name")):
        raise errors.not_found()
    return support.no_content()
