"""Policies and operator policies (API-11, POL-8).

One set of handlers serves both kinds; only the table, the allowed keys and
who may use them differ (policymakers for policies, administrators for
operator policies).  A body is validated completely by
``model.policies.validate`` before the vhost is touched, and a refusal is
RabbitMQ's ``Validation failed`` body.

A change is applied to the vhost's queues and exchanges in slices of bounded work
(``model/policychanges``), awaiting between slices: the request waits for its own matching,
the other connections on the event loop do not.  The response is sent once every entity has
its new policy, as before.  The body's pattern is parsed and compiled in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from hutch_broker.admin import auth, bodies, errors, slicing
from hutch_broker.admin.handlers import support
from hutch_broker.model import access
from hutch_broker.model import policies as policies_mod
from hutch_broker.model.broker import Broker
from hutch_broker.model.vhosts import VirtualHost

routes = web.RouteTableDef()
Handler = Callable[[web.Request], Awaitable[web.Response]]


def _table(vhost: VirtualHost, *, operator: bool) -> dict[str, policies_mod.Policy]:
    return vhost.operator_policies if operator else vhost.policies


def _vhost(
    broker: Broker, user: access.User, name: str, *, operator: bool, creating: bool = False
) -> VirtualHost:
    if operator:
        auth.require_admin(user)
        return auth.vhost_for_writing(broker, user, name, creating=creating)
    return auth.vhost_for_policies(broker, user, name, creating=creating)


def _policy_vhosts(broker: Broker, user: access.User, *, operator: bool) -> list[VirtualHost]:
    if operator:
        auth.require_admin(user)
    elif not auth.is_policymaker(user):
        raise errors.not_authorized("User not authorised to access object")
    return [
        vhost
        for vhost in broker.vhosts.values()
        if auth.is_admin(user) or auth.can_log_in(broker, user, vhost.name)
    ]


def parse_policy(body: object, *, vhost: str, name: str, operator: bool) -> policies_mod.Policy:
    bodies.name("policy", name)
    if isinstance(body, dict):
        for key in ("pattern", "definition"):
            if key not in body:  # RabbitMQ answers a missing key without "Validation failed"
                raise errors.bad_request(f"[{{key_missing,{key}}}]")
    policy, detail = policies_mod.validate(body, operator=operator)
    if policy is None:
        raise errors.validation_failed(detail or "invalid policy")
    bodies.named_values(policy.definition)  # a DLX, its routing key or an AE: shortstrs
    policy.vhost = vhost
    policy.name = name
    return policy


async def parse_off_loop(
    body: object, *, vhost: str, name: str, operator: bool
) -> policies_mod.Policy:
    """``parse_policy`` in a worker thread: parsing and compiling a long pattern takes up to
    hundreds of ms (``re``'s own parser), and a thread gives the loop the interpreter back
    every few ms (``sys.getswitchinterval``) where the loop itself would not."""
    return await asyncio.to_thread(parse_policy, body, vhost=vhost, name=name, operator=operator)


def _list_all(*, operator: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        broker = support.state(request).broker
        items = [
            policy.as_json()
            for vhost in _policy_vhosts(broker, support.user(request), operator=operator)
            for policy in _table(vhost, operator=operator).values()
        ]
        return support.list_response(request, items)

    return handler


def _list_vhost(*, operator: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        broker, user = support.state(request).broker, support.user(request)
        vhost = _vhost(broker, user, support.path(request, "vhost"), operator=operator)
        items = [policy.as_json() for policy in _table(vhost, operator=operator).values()]
        return support.list_response(request, items)

    return handler


def _get(*, operator: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        broker, user = support.state(request).broker, support.user(request)
        vhost = _vhost(broker, user, support.path(request, "vhost"), operator=operator)
        policy = _table(vhost, operator=operator).get(support.path(request, "name"))
        if policy is None:
            raise errors.not_found()
        return support.item_response(request, policy.as_json())

    return handler


def _put(*, operator: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        broker, user = support.state(request).broker, support.user(request)
        vhost = _vhost(
            broker, user, support.path(request, "vhost"), operator=operator, creating=True
        )
        if operator:
            support.require_operator_policy_changes(request)
        name = support.path(request, "name")
        body = await support.body(request)
        policy = await parse_off_loop(body, vhost=vhost.name, name=name, operator=operator)
        created = name not in _table(vhost, operator=operator)
        await slicing.apply_in_slices(vhost.change_policy(name, policy, operator=operator))
        return support.created_or_updated(created)

    return handler


def _delete(*, operator: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        broker, user = support.state(request).broker, support.user(request)
        vhost = _vhost(broker, user, support.path(request, "vhost"), operator=operator)
        if operator:
            support.require_operator_policy_changes(request)
        name = support.path(request, "name")
        if name not in _table(vhost, operator=operator):
            raise errors.not_found()
        await slicing.apply_in_slices(vhost.change_policy(name, None, operator=operator))
        return support.no_content()

    return handler


for _prefix, _operator in (("/api/policies", False), ("/api/operator-policies", True)):
    routes.get(_prefix)(_list_all(operator=_operator))
    routes.get(_prefix + "/{vhost}")(_list_vhost(operator=_operator))
    routes.get(_prefix + "/{vhost}/{name}")(_get(operator=_operator))
    routes.put(_prefix + "/{vhost}/{name}")(_put(operator=_operator))
    routes.delete(_prefix + "/{vhost}/{name}")(_delete(operator=_operator))
