"""set_policy, clear_policy, list_policies and their operator-policy twins.

Why together: the two kinds differ only in the API prefix and rabbitmqctl's wording ("policy"
against "operator policy override"), so one builder per action serves both.
"""

from __future__ import annotations

from typing import Any

from hutch_cli import exitcodes, plans
from hutch_cli.verbs import common
from hutch_cli.verbs.common import Context, Verb

COLUMNS = ("vhost", "name", "pattern", "apply-to", "definition", "priority")
KINDS = ("plain", "plain", "plain", "plain", "json", "plain")


def _prefix(operator: bool) -> str:
    return "/api/operator-policies" if operator else "/api/policies"


def set_policy(ctx: Context, args: tuple[str, ...], *, operator: bool = False) -> plans.Plan:
    name, pattern, definition_text = args
    priority_text = ctx.invocation.value("priority", "0") or "0"
    what = "operator policy override" if operator else "policy"
    banner = (
        f'Setting {what} "{name}" for pattern "{pattern}" to "{definition_text}" with priority '
        f'"{priority_text}" for vhost "{ctx.vhost}" ...',
    )
    definition = common.decode_json(definition_text)
    if isinstance(definition, plans.Fail):
        return common.failing(banner, definition)
    body: dict[str, Any] = {
        "pattern": pattern,
        "definition": definition,
        "priority": int(priority_text),
        "apply-to": ctx.invocation.value("apply-to", "all"),
    }
    path = f"{_prefix(operator)}/{common.quote(ctx.vhost)}/{common.quote(name)}"
    return plans.Plan(banner, (common.vhost_exists(ctx.vhost), common.put(path, body)))


def clear_policy(ctx: Context, args: tuple[str, ...], *, operator: bool = False) -> plans.Plan:
    (name,) = args
    what = "operator policy" if operator else "policy"
    path = f"{_prefix(operator)}/{common.quote(ctx.vhost)}/{common.quote(name)}"
    return plans.Plan(
        (f'Clearing {what} "{name}" on vhost "{ctx.vhost}" ...',),
        (common.delete(path, s404=common.PARAMETER_MISSING),),
    )


def list_policies(ctx: Context, _args: tuple[str, ...], *, operator: bool = False) -> plans.Plan:
    what = "operator policy overrides" if operator else "policies"
    return plans.Plan(
        (f'Listing {what} for vhost "{ctx.vhost}" ...',),
        (
            common.vhost_exists(ctx.vhost),
            common.get(f"{_prefix(operator)}/{common.quote(ctx.vhost)}"),
        ),
        render=lambda bodies: plans.Table(COLUMNS, common.rows(bodies[-1], COLUMNS), KINDS),
    )


def _priority_is_a_number(ctx: Context) -> plans.Fail | None:
    priority = ctx.invocation.value("priority")
    if priority is not None and not priority.lstrip("-").isdigit():
        return plans.Fail(
            exitcodes.USAGE, f"Invalid options for this command: --priority : {priority}"
        )
    return None


def _checked_set(operator: bool) -> common.Builder:
    def build(ctx: Context, args: tuple[str, ...]) -> plans.Plan | plans.Fail:
        return _priority_is_a_number(ctx) or set_policy(ctx, args, operator=operator)

    return build


SET_OPTIONS = frozenset({"priority", "apply-to"})
SET_USAGE = (
    "[-p <vhost>] [--priority <priority>] [--apply-to <apply-to>] <name> <pattern> <definition>"
)

VERBS = (
    Verb("set_policy", SET_USAGE, _checked_set(False), 3, options=SET_OPTIONS),
    Verb("clear_policy", "[-p <vhost>] <name>", clear_policy, 1),
    Verb("list_policies", "[-p <vhost>]", list_policies, 0),
    Verb("set_operator_policy", SET_USAGE, _checked_set(True), 3, options=SET_OPTIONS),
    Verb(
        "clear_operator_policy",
        "[-p <vhost>] <name>",
        lambda ctx, args: clear_policy(ctx, args, operator=True),
        1,
    ),
    Verb(
        "list_operator_policies",
        "[-p <vhost>]",
        lambda ctx, args: list_policies(ctx, args, operator=True),
        0,
    ),
)
