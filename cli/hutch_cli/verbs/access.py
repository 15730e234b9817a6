"""Vhosts, users, permissions and topic permissions.

Why one module: these verbs share rabbitmqctl's user and vhost checks, whose exit codes differ by
verb (67 for a missing user; 65 or 69 for a missing vhost) and which rabbitmqctl makes user first.
change_password and set_user_tags read the user first so the PUT keeps what the verb does not
change (the tags, or the password hash).
"""

from __future__ import annotations

from typing import Any

from hutch_cli import exitcodes, plans
from hutch_cli.verbs import common, listings
from hutch_cli.verbs.common import Context, Verb

_PERMISSIONS = ("configure", "write", "read")


def add_vhost(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (name,) = args
    body: dict[str, Any] = {}
    for option, key in (
        ("description", "description"),
        ("tags", "tags"),
        ("default-queue-type", "default_queue_type"),
    ):
        value = ctx.invocation.value(option)
        if value is not None:
            body[key] = value
    return plans.Plan(
        (f'Adding vhost "{name}" ...',), (common.put(f"/api/vhosts/{common.quote(name)}", body),)
    )


def delete_vhost(_ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (name,) = args
    missing = plans.Fail(exitcodes.DATA_ERROR, f"Virtual host '{name}' does not exist")
    return plans.Plan(
        (f'Deleting vhost "{name}" ...',),
        (common.delete(f"/api/vhosts/{common.quote(name)}", s404=missing),),
    )


def add_user(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    name = args[0]
    banner = (f'Adding user "{name}" ...',)
    password = args[1] if len(args) > 1 else ctx.read_password()
    if password is None:
        return common.failing(
            banner,
            plans.Fail(exitcodes.DATA_ERROR, "Password is not provided via argument or stdin"),
        )
    exists = plans.Fail(exitcodes.SOFTWARE, f'User "{name}" already exists')
    path = f"/api/users/{common.quote(name)}"
    return plans.Plan(
        banner,
        (
            common.get(path, s200=exists, s404=plans.Substitute()),
            common.put(path, {"password": password, "tags": ""}),
        ),
        render=lambda _bodies: plans.Done(
            (
                "Done. Don't forget to grant the user permissions to some virtual hosts! "
                "See 'hutchctl set_permissions'.",
            )
        ),
    )


def delete_user(_ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (name,) = args
    missing = plans.Fail(exitcodes.NO_USER, f'User "{name}" does not exist')
    return plans.Plan(
        (f'Deleting user "{name}" ...',),
        (common.delete(f"/api/users/{common.quote(name)}", s404=missing),),
    )


def change_password(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    name = args[0]
    banner = (f'Changing password for user "{name}" ...',)
    password = args[1] if len(args) > 1 else ctx.read_password()
    if password is None:
        return common.failing(
            banner,
            plans.Fail(exitcodes.SOFTWARE, "Password is not provided via argument or stdin"),
        )
    path = f"/api/users/{common.quote(name)}"

    def keep_tags(bodies: list[Any]) -> plans.Request:
        tags = bodies[0].get("tags", [])
        return plans.Request("PUT", path, {"password": password, "tags": _tag_list(tags)})

    return plans.Plan(banner, (common.user_exists(name), plans.Step(keep_tags)))


def set_user_tags(_ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    name, tags = args[0], args[1:]
    path = f"/api/users/{common.quote(name)}"

    def keep_password(bodies: list[Any]) -> plans.Request:
        user = bodies[0]
        body = {
            "password_hash": user.get("password_hash", ""),
            "hashing_algorithm": user.get("hashing_algorithm", "rabbit_password_hashing_sha256"),
            "tags": ",".join(tags),
        }
        return plans.Request("PUT", path, body)

    return plans.Plan(
        (f'Setting tags for user "{name}" to [{", ".join(tags)}] ...',),
        (common.user_exists(name), plans.Step(keep_password)),
    )


def _tag_list(tags: Any) -> str:
    return ",".join(tags) if isinstance(tags, list) else str(tags or "")


def list_users(ctx: Context, args: tuple[str, ...]) -> plans.Plan | plans.Fail:
    return listings.listing(ctx, args, listings.USERS)


def set_permissions(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    user, configure, write, read = args
    path = f"/api/permissions/{common.quote(ctx.vhost)}/{common.quote(user)}"
    return plans.Plan(
        (f'Setting permissions for user "{user}" in vhost "{ctx.vhost}" ...',),
        (
            *_user_and_vhost(user, ctx.vhost),
            common.put(path, {"configure": configure, "write": write, "read": read}),
        ),
    )


def clear_permissions(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (user,) = args
    path = f"/api/permissions/{common.quote(ctx.vhost)}/{common.quote(user)}"
    return plans.Plan(
        (f'Clearing permissions for user "{user}" in vhost "{ctx.vhost}" ...',),
        (*_user_and_vhost(user, ctx.vhost), common.delete(path, s404=plans.Substitute())),
    )


def set_topic_permissions(ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    user, exchange, write, read = args
    path = f"/api/topic-permissions/{common.quote(ctx.vhost)}/{common.quote(user)}"
    return plans.Plan(
        (
            f'Setting topic permissions on "{exchange}" for user "{user}" '
            f'in vhost "{ctx.vhost}" ...',
        ),
        (
            *_user_and_vhost(user, ctx.vhost),
            common.put(path, {"exchange": exchange, "write": write, "read": read}),
        ),
    )


def _user_and_vhost(user: str, vhost: str) -> tuple[plans.Step, plans.Step]:
    return (
        common.user_exists(user, quoted=False),
        common.vhost_exists(vhost, code=exitcodes.UNAVAILABLE),
    )


def list_permissions(ctx: Context, _args: tuple[str, ...]) -> plans.Plan:
    fields = ("user", *_PERMISSIONS)
    return plans.Plan(
        (f'Listing permissions for vhost "{ctx.vhost}" ...',),
        (
            common.vhost_exists(ctx.vhost),
            common.get(f"/api/vhosts/{common.quote(ctx.vhost)}/permissions"),
        ),
        render=lambda bodies: plans.Table(fields, common.rows(bodies[-1], fields)),
    )


def list_user_permissions(_ctx: Context, args: tuple[str, ...]) -> plans.Plan:
    (user,) = args
    fields = ("vhost", *_PERMISSIONS)
    missing = plans.Fail(exitcodes.UNAVAILABLE, f"no_such_user: {user}")
    return plans.Plan(
        (f'Listing permissions for user "{user}" ...',),
        (
            common.get(f"/api/users/{common.quote(user)}", s404=missing),
            common.get(f"/api/users/{common.quote(user)}/permissions"),
        ),
        render=lambda bodies: plans.Table(fields, common.rows(bodies[-1], fields)),
    )


def list_topic_permissions(ctx: Context, _args: tuple[str, ...]) -> plans.Plan:
    fields = ("user", "exchange", "write", "read")
    return plans.Plan(
        (f'Listing topic permissions for vhost "{ctx.vhost}" ...',),
        (
            common.vhost_exists(ctx.vhost),
            common.get(f"/api/vhosts/{common.quote(ctx.vhost)}/topic-permissions"),
        ),
        render=lambda bodies: plans.Table(fields, common.rows(bodies[-1], fields)),
    )


VERBS = (
    Verb(
        "add_vhost",
        "<vhost> [--description <description>] [--tags <tags>] [--default-queue-type <type>]",
        add_vhost,
        1,
        options=frozenset({"description", "tags", "default-queue-type"}),
    ),
    Verb("delete_vhost", "<vhost>", delete_vhost, 1),
    Verb(
        "list_vhosts", "[<column> ...]", lambda c, a: listings.listing(c, a, listings.VHOSTS), 0, -1
    ),
    Verb("add_user", "<username> [<password>]", add_user, 1, 1),
    Verb("delete_user", "<username>", delete_user, 1),
    Verb("change_password", "<username> [<password>]", change_password, 1, 1),
    Verb("set_user_tags", "<username> [<tag> ...]", set_user_tags, 1, -1),
    Verb("list_users", "[<column> ...]", list_users, 0, -1),
    Verb("set_permissions", "[-p <vhost>] <username> <conf> <write> <read>", set_permissions, 4),
    Verb("clear_permissions", "[-p <vhost>] <username>", clear_permissions, 1),
    Verb("list_permissions", "[-p <vhost>]", list_permissions, 0),
    Verb("list_user_permissions", "<username>", list_user_permissions, 1),
    Verb(
        "set_topic_permissions",
        "[-p <vhost>] <username> <exchange> <write> <read>",
        set_topic_permissions,
        4,
    ),
    Verb("list_topic_permissions", "[-p <vhost>]", list_topic_permissions, 0),
)
