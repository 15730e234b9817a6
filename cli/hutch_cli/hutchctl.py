"""hutchctl's entry point: the thin shell around the pure parts.

Why so thin: everything worth testing is a pure function (arguments, verbs, execution,
formatting); this module only reads sys.argv, the environment, files and stdin, prints, and
returns the exit code. No traceback ever reaches the user: every failure is one line on stderr
and one of rabbitmqctl's exit codes.
"""

from __future__ import annotations

import os
import ssl
import sys
import time
from pathlib import Path

from hutch_cli import arguments, client, execution, exitcodes, formatting, plans, settings, verbs
from hutch_cli.verbs.common import Context


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        invocation = arguments.parse(args)
    except arguments.UsageError as error:
        return _fail(plans.Fail(exitcodes.USAGE, f"Error (argument validation): {error}"))
    if invocation.flag("help") or (invocation.verb == "help" and not invocation.positionals):
        sys.stdout.write(_help())
        return exitcodes.OK
    context = Context(invocation, read_file=_read_file, read_password=_read_password)
    plan = verbs.plan(context)
    if isinstance(plan, plans.Fail):
        return _fail(plan)
    target = settings.endpoint(invocation, os.environ, _read_file)
    if isinstance(target, plans.Fail):
        return _fail(target)
    try:
        http = client.Client(target)
    except (OSError, ssl.SSLError) as error:
        return _fail(
            plans.Fail(exitcodes.DATA_ERROR, f"cannot use --cacert {target.cacert}: {error}")
        )
    style = formatting.Style(
        quiet=invocation.flag("quiet"),
        silent=invocation.flag("silent"),
        no_headers=invocation.flag("no-table-headers"),
        json=invocation.value("formatter") == "json",
    )
    if style.banner and plan.banner:
        sys.stdout.write("".join(line + "\n" for line in plan.banner))
        sys.stdout.flush()
    if plan.wait_seconds is not None:
        outcome = execution.execute_waiting(plan, http.send, clock=time.monotonic, sleep=time.sleep)
    else:
        outcome = execution.execute(plan, http.send)
    outcome = _write_file(outcome)
    shown = formatting.printed((), outcome, style)
    sys.stdout.write(shown.stdout)
    sys.stderr.write(shown.stderr)
    return outcome.code


def _write_file(outcome: execution.Outcome) -> execution.Outcome:
    if not isinstance(outcome.result, plans.WriteFile):
        return outcome
    try:
        Path(outcome.result.path).write_text(outcome.result.text, encoding="utf-8")
    except OSError as error:
        return execution.Outcome(
            exitcodes.DATA_ERROR, error=f"cannot write {outcome.result.path}: {error.strerror}"
        )
    return execution.Outcome(exitcodes.OK, result=plans.Done())


def _fail(failure: plans.Fail) -> int:
    sys.stderr.write(
        f"Error: {failure.message}\n"
        if not failure.message.startswith("Error")
        else failure.message + "\n"
    )
    return failure.code


def _read_file(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    return Path(path).read_text(encoding="utf-8")


def _read_password() -> str | None:
    """A password from stdin when it is piped (as rabbitmqctl reads it); None otherwise."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    line = sys.stdin.readline().rstrip("\r\n")
    return line or None


def _help() -> str:
    lines = [
        "Usage: hutchctl [--url <url>] [--username <user>] [--password <password>]",
        "                [--credentials-file <file>] [--cacert <file>] [-p <vhost>]",
        "                [-q | -s] [--formatter json] <command> [<arguments>]",
        "",
        "Commands:",
        *(f"  {verbs.usage(verb)}" for verb in verbs.VERBS.values()),
        "",
        "Exit codes: 0 ok, 64 usage, 65 data error, 67 no such user, 69 unavailable or refused,",
        "70 internal error, 75 timeout (rabbitmqctl's).",
    ]
    return "\n".join(lines) + "\n"
