"""The verb table: name -> how to check its arguments and build its plan.

Why one registry: argument-count and option checks are rabbitmqctl's for every verb (64 with one
line), so they are made here once, before any verb's builder runs; a builder can then unpack its
positionals without checking them.
"""

from __future__ import annotations

from hutch_cli import arguments, exitcodes, plans
from hutch_cli.verbs import access, listings, operations, parameters, policies
from hutch_cli.verbs.common import Context, Verb

VERBS: dict[str, Verb] = {
    verb.name: verb
    for module in (policies, parameters, access, listings, operations)
    for verb in module.VERBS
}


def usage(verb: Verb) -> str:
    return f"hutchctl [--url <url>] [--quiet] {verb.name} {verb.usage}".rstrip()


def plan(ctx: Context) -> plans.Plan | plans.Fail:
    """The plan for the command line in ``ctx``, or its usage error (exit code 64)."""
    name = ctx.invocation.verb
    if name is None:
        return plans.Fail(exitcodes.USAGE, "no command given; see 'hutchctl --help'")
    verb = VERBS.get(name)
    if verb is None:
        return plans.Fail(exitcodes.USAGE, f"Command '{name}' not found; see 'hutchctl --help'")
    problem = _argument_problem(ctx, verb)
    if problem is not None:
        return plans.Fail(exitcodes.USAGE, f"{problem}. Usage: {usage(verb)}")
    return verb.build(ctx, ctx.invocation.positionals)


def _argument_problem(ctx: Context, verb: Verb) -> str | None:
    count = len(ctx.invocation.positionals)
    if count < verb.required:
        return "Error (argument validation): not enough arguments"
    if verb.optional >= 0 and count > verb.required + verb.optional:
        return "Error (argument validation): too many arguments"
    allowed = arguments.GLOBAL_OPTIONS | verb.options
    extra = sorted(option for option in ctx.invocation.options if option not in allowed)
    if extra:
        return f"Error (argument validation): Invalid options for this command: --{extra[0]}"
    return None
