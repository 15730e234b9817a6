"""Runtime parameters, global parameters, and vhost and user limits.

Why together: all are JSON values under a name, set and cleared the same way. set_vhost_limits
writes the whole ``vhost-limits`` parameter (rabbitmqctl replaces the object: a second call without
a key drops it), while set_user_limits sets key by key (rabbitmqctl merges into the user's
limits); both measured on RabbitMQ 3.10.8.
"""

from __future__ import annotations

from typing import Any

from hutch_cli import exitcodes, plans
from hutch_cli.verbs import common
from hutch_cli.verbs.common import Context, Verb

# Policies are shown by list_policies only; operator policies are listed here too, as rabbitmqctl
# 3.10.8 does (their component is operator_policy).
_POLICY_COMPONENT = "policy"


def set_parameter(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    component, name, value_text = args
    banner = (
        f'Setting runtime parameter "{name}" for component "{component}" to "{value_text}" '
        f'in vhost "{ctx.vhost}" ...',
    )
    value = common.decode_json(value_text)
    if isinstance(value, plans.Fail):
        return common.failing(banner, value)
    path = (
        f"/api/parameters/{common.quote(component)}/{common.quote(ctx.vhost)}/{common.quote(name)}"
    )
    body = {"component": component, "vhost": ctx.vhost, "name": name, "value": value}
    return plans.Plan(banner, (common.vhost_exists(ctx.vhost), common.put(path, body)))


def clear_parameter(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    component, name = args
    path = (
        f"/api/parameters/{common.quote(component)}/{common.quote(ctx.vhost)}/{common.quote(name)}"
    )
    return plans.Plan(
        (
            f'Clearing runtime parameter "{name}" for component "{component}" '
            f'on vhost "{ctx.vhost}" ...',
        ),
        (common.delete(path, s404=common.PARAMETER_MISSING),),
    )


def list_parameters(ctx: Context, _args: tuple[str, ...]) -> plans.Plan:
    vhost = ctx.vhost

    def render(bodies: list[Any]) -> plans.Result:
        listed = [
            item
            for item in bodies[-1]
            if item.get("vhost") == vhost and item.get("component") != _POLICY_COMPONENT
        ]
        fields = ("component", "name", "value")
        return plans.Table(fields, common.rows(listed, fields), ("plain", "plain", "json"))

    return plans.Plan(
        (f'Listing runtime parameters for vhost "{vhost}" ...',),
        (common.vhost_exists(vhost), common.get("/api/parameters")),
        render=render,
    )


def set_global_parameter(_ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    name, value_text = args
    banner = (f'Setting global runtime parameter "{name}" to "{value_text}" ...',)
    value = common.decode_json(value_text)
    if isinstance(value, plans.Fail):
        return common.failing(banner, value)
    path = f"/api/global-parameters/{common.quote(name)}"
    return plans.Plan(banner, (common.put(path, {"name": name, "value": value}),))


def clear_global_parameter(_ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (name,) = args
    return plans.Plan(
        (f'Clearing global runtime parameter "{name}" ...',),
        (
            common.delete(
                f"/api/global-parameters/{common.quote(name)}", s404=common.PARAMETER_MISSING
            ),
        ),
    )


def list_global_parameters(_ctx: Context, _args: tuple[str, ...]) -> plans.Plan:
    fields = ("name", "value")
    return plans.Plan(
        ("Listing global runtime parameters ...",),
        (common.get("/api/global-parameters"),),
        render=lambda bodies: plans.Table(
            fields, common.rows(bodies[-1], fields), ("plain", "json")
        ),
    )


def set_vhost_limits(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (definition_text,) = args
    banner = (f'Setting vhost limits to "{definition_text}" for vhost "{ctx.vhost}" ...',)
    definition = common.decode_json(definition_text)
    if isinstance(definition, plans.Fail):
        return common.failing(banner, definition)
    path = f"/api/parameters/vhost-limits/{common.quote(ctx.vhost)}/limits"
    body = {"component": "vhost-limits", "vhost": ctx.vhost, "name": "limits", "value": definition}
    return plans.Plan(banner, (common.vhost_exists(ctx.vhost), common.put(path, body)))


def clear_vhost_limits(ctx: Context, _args: tuple[str, ...]) -> plans.Plan:
    path = f"/api/parameters/vhost-limits/{common.quote(ctx.vhost)}/limits"
    return plans.Plan(
        (f'Clearing vhost "{ctx.vhost}" limits ...',),
        (common.vhost_exists(ctx.vhost), common.delete(path, s404=plans.Substitute())),
    )


def list_vhost_limits(ctx: Context, _args: tuple[str, ...]) -> plans.Plan:
    def render(bodies: list[Any]) -> plans.Result:
        listed = bodies[-1] if isinstance(bodies[-1], list) else []
        values = [item.get("value", {}) for item in listed]
        return plans.Text(tuple(common.compact(value) for value in values) or ("",))

    return plans.Plan(
        (f'Listing limits for vhost "{ctx.vhost}" ...',),
        (
            common.vhost_exists(ctx.vhost),
            common.get(f"/api/vhost-limits/{common.quote(ctx.vhost)}"),
        ),
        render=render,
    )


def set_user_limits(_ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    user, definition_text = args
    banner = (f'Setting user limits to "{definition_text}" for user "{user}" ...',)
    definition = common.decode_json(definition_text)
    if isinstance(definition, plans.Fail):
        return common.failing(banner, definition)
    if not isinstance(definition, dict):
        return common.failing(
            banner, plans.Fail(exitcodes.UNAVAILABLE, f"Unrecognised terms {definition_text}")
        )
    no_user = plans.Fail(exitcodes.UNAVAILABLE, f"no_such_user: {user}")
    steps = [common.get(f"/api/users/{common.quote(user)}", s404=no_user)]
    for key, value in definition.items():
        path = f"/api/user-limits/{common.quote(user)}/{common.quote(key)}"
        steps.append(common.put(path, {"value": value}))
    return plans.Plan(banner, tuple(steps))


def list_user_limits(ctx: Context, _args: tuple[str, ...]) -> plans.Plan:
    user = ctx.invocation.value("user", "guest") or "guest"

    def render(bodies: list[Any]) -> plans.Result:
        listed = bodies[-1] if isinstance(bodies[-1], list) else []
        merged: dict[str, Any] = {}
        for item in listed:
            merged.update(item.get("value", {}))
        return plans.Text((common.compact(merged),))

    no_user = plans.Fail(exitcodes.UNAVAILABLE, f"no_such_user: {user}")
    return plans.Plan(
        (f'Listing limits for user "{user}" ...',),
        (
            common.get(f"/api/users/{common.quote(user)}", s404=no_user),
            common.get(f"/api/user-limits/{common.quote(user)}", s404=plans.Substitute([])),
        ),
        render=render,
    )


VERBS = (
    Verb("set_parameter", "[-p <vhost>] <component> <name> <value>", set_parameter, 3),
    Verb("clear_parameter", "[-p <vhost>] <component> <name>", clear_parameter, 2),
    Verb("list_parameters", "[-p <vhost>]", list_parameters, 0),
    Verb("set_global_parameter", "<name> <value>", set_global_parameter, 2),
    Verb("clear_global_parameter", "<name>", clear_global_parameter, 1),
    Verb("list_global_parameters", "", list_global_parameters, 0),
    Verb("set_vhost_limits", "[-p <vhost>] <definition>", set_vhost_limits, 1),
    Verb("clear_vhost_limits", "[-p <vhost>]", clear_vhost_limits, 0),
    Verb("list_vhost_limits", "[-p <vhost>]", list_vhost_limits, 0),
    Verb("set_user_limits", "<username> <definition>", set_user_limits, 2),
    Verb(
        "list_user_limits",
        "[--user <username>]",
        list_user_limits,
        0,
        options=frozenset({"user"}),
    ),
)
