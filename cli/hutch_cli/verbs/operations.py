"""Operations on the broker's contents and on the node: queues, connections, definitions, status.

Why together: these are the verbs that act rather than configure. rabbitmqctl's exit codes here
are its own: purge_queue on a missing queue is 69 "not_found" but delete_queue is 64 "Queue not
found"; a definitions file that is missing or not JSON is 65. status prints what hutch-broker's
management API reports (a subset of rabbitmqctl's, as there is no Erlang runtime to describe).
"""

from __future__ import annotations

import json
from typing import Any

from hutch_cli import exitcodes, plans
from hutch_cli.verbs import common
from hutch_cli.verbs.common import Context, Verb


def purge_queue(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (name,) = args
    path = f"/api/queues/{common.quote(ctx.vhost)}/{common.quote(name)}/contents"
    return plans.Plan(
        (f"Purging queue '{name}' in vhost '{ctx.vhost}' ...",),
        (common.delete(path, s404=plans.Fail(exitcodes.UNAVAILABLE, "not_found")),),
    )


def delete_queue(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (name,) = args
    path = f"/api/queues/{common.quote(ctx.vhost)}/{common.quote(name)}"
    conditions = [c for c in ("if-empty", "if-unused") if ctx.invocation.flag(c)]
    query = "&".join(f"{condition}=true" for condition in conditions)
    wording = {"if-empty": "if queue is empty", "if-unused": "if queue is unused"}
    suffix = "".join(" " + wording[c] for c in conditions)
    missing = plans.Fail(exitcodes.USAGE, "Queue not found")

    def render(bodies: list[Any]) -> plans.Result:
        ready = bodies[0].get("messages_ready") or 0
        return plans.Done((f"Queue was successfully deleted with {ready} ready messages",))

    return plans.Plan(
        (f"Deleting queue '{name}' on vhost '{ctx.vhost}'{suffix} ...",),
        (
            common.get(path, s404=missing),
            plans.Step(
                plans.Request("DELETE", path + ("?" + query if query else "")), {404: missing}
            ),
        ),
        render=render,
    )


def close_connection(_ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    name, reason = args
    request = plans.Request(
        "DELETE", f"/api/connections/{common.quote(name)}", headers=(("X-Reason", reason),)
    )
    missing = plans.Fail(exitcodes.UNAVAILABLE, f"connection {name!r} not found")
    return plans.Plan(
        (f"Closing connection {name}, reason: {reason}...",), (plans.Step(request, {404: missing}),)
    )


def export_definitions(_ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (target,) = args

    def render(bodies: list[Any]) -> plans.Result:
        text = common.compact(bodies[-1])
        return plans.Text((text,)) if target == "-" else plans.WriteFile(target, text + "\n")

    banner = (
        () if target == "-" else (f'Exporting definitions in JSON to a file at "{target}" ...',)
    )
    return plans.Plan(banner, (common.get("/api/definitions"),), render=render)


def import_definitions(ctx: Context, args: tuple[str, ...]) -> plans.Plan | plans.Fail:
    (source,) = args
    try:
        text = ctx.read_file(source)
    except OSError as error:
        return plans.Fail(
            exitcodes.DATA_ERROR, f"Bad argument: File {source} cannot be read ({error.strerror})"
        )
    shown = "standard input" if source == "-" else f'a file at "{source}"'
    banner = (f"Importing definitions in JSON from {shown} ...",)
    try:
        definitions = json.loads(text)
    except ValueError as error:
        return common.failing(
            banner,
            plans.Fail(
                exitcodes.DATA_ERROR,
                f"Failed to deserialise input (format: JSON) (error: {error})",
            ),
        )
    step = plans.Step(plans.Request("POST", "/api/definitions", definitions))
    return plans.Plan(
        banner,
        (step,),
        render=lambda _bodies: plans.Done(("Successfully imported definitions.",)),
    )


def status(_ctx: Context, _args: tuple[str, ...]) -> plans.Plan:
    return plans.Plan(
        (), (common.get("/api/overview"), common.get("/api/nodes")), render=_status_text
    )


def _status_text(bodies: list[Any]) -> plans.Result:
    overview, nodes = bodies
    node = nodes[0] if isinstance(nodes, list) and nodes else {}
    totals = overview.get("object_totals", {})
    alarms = [
        name
        for name, key in (("memory", "mem_alarm"), ("free disk space", "disk_free_alarm"))
        if node.get(key)
    ]
    gigabytes = 1024**3
    lines = [
        f"Status of node {overview.get('node', '?')} ...",
        "Runtime",
        "",
        f"OS PID: {node.get('os_pid', '')}",
        f"Uptime (seconds): {int(node.get('uptime', 0)) // 1000}",
        f"Product: {overview.get('product_name', '')} {overview.get('product_version', '')}",
        f"RabbitMQ version: {overview.get('rabbitmq_version', '')}",
        f"Node name: {overview.get('node', '')}",
        "",
        "Alarms",
        "",
        *(alarms or ["(none)"]),
        "",
        "Memory",
        "",
        f"Total memory used: {node.get('mem_used', 0) / gigabytes:.4f} gb",
        f"Memory high watermark: {node.get('mem_limit', 0) / gigabytes:.4f} gb",
        "",
        "Totals",
        "",
        f"Connection count: {totals.get('connections', 0)}",
        f"Queue count: {totals.get('queues', 0)}",
        "",
        "Listeners",
        "",
        *(
            f"Interface: {item.get('ip_address')}, port: {item.get('port')}, "
            f"protocol: {item.get('protocol')}"
            for item in overview.get("listeners", [])
        ),
    ]
    return plans.Text(tuple(lines))


def await_startup(ctx: Context, _args: tuple[str, ...]) -> plans.Plan:
    timeout = float(ctx.invocation.value("timeout", "300") or "300")
    return plans.Plan((), (common.get("/api/overview"),), wait_seconds=timeout)


VERBS = (
    Verb("purge_queue", "[-p <vhost>] <queue>", purge_queue, 1),
    Verb(
        "delete_queue",
        "[-p <vhost>] <queue> [--if-empty] [--if-unused]",
        delete_queue,
        1,
        options=frozenset({"if-empty", "if-unused"}),
    ),
    Verb("close_connection", "<connection name> <explanation>", close_connection, 2),
    Verb("export_definitions", "<file_path | ->", export_definitions, 1),
    Verb("import_definitions", "<file_path | ->", import_definitions, 1),
    Verb("status", "", status, 0),
    Verb("await_startup", "[--timeout <seconds>]", await_startup, 0),
)
