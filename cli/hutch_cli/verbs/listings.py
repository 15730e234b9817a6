"""The list_* verbs with rabbitmqctl's column selection (``list_queues name messages consumers``).

Why a table of listings: each is the same shape (a banner, one GET, named columns read from the
API's items, rabbitmqctl's default columns), so a verb is one ``Listing`` value. Column names are
rabbitmqctl's info keys; an unknown one is a usage error (64) as in rabbitmqctl. rabbitmqctl lists
an unknown vhost's queues, exchanges, bindings and consumers as nothing, with exit code 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hutch_cli import exitcodes, plans
from hutch_cli.verbs import common
from hutch_cli.verbs.common import Context, Verb


@dataclass(frozen=True)
class Column:
    read: Callable[[dict[str, Any]], Any]
    kind: str = "plain"  # formatting: plain, json, pairs (arguments), tags


@dataclass(frozen=True)
class Listing:
    verb: str
    banner: Callable[[str], tuple[str, ...]]
    path: Callable[[str], str]
    defaults: tuple[str, ...]
    columns: Mapping[str, Column]


def _field(name: str, kind: str = "plain") -> Column:
    return Column(lambda item: item.get(name), kind)


def _nested(outer: str, inner: str) -> Column:
    return Column(lambda item: (item.get(outer) or {}).get(inner))


def _fields(*names: str) -> dict[str, Column]:
    return {name: _field(name) for name in names}


QUEUES = Listing(
    "list_queues",
    lambda vhost: ("Timeout: 60.0 seconds ...", f"Listing queues for vhost {vhost} ..."),
    lambda vhost: f"/api/queues/{common.quote(vhost)}",
    ("name", "messages"),
    {
        **_fields(
            "name", "durable", "auto_delete", "policy", "exclusive", "exclusive_consumer_tag",
            "messages_ready", "messages_unacknowledged", "messages", "messages_ready_ram",
            "messages_unacknowledged_ram", "messages_ram", "messages_persistent", "message_bytes",
            "message_bytes_ready", "message_bytes_unacknowledged", "message_bytes_ram",
            "message_bytes_persistent", "head_message_timestamp", "consumers",
            "consumer_utilisation", "consumer_capacity", "memory", "slave_pids",
            "synchronised_slave_pids", "state", "type", "leader", "members", "online",
        ),
        "arguments": _field("arguments", "pairs"),
        "pid": _field("node"),  # no Erlang pids: the node the queue lives on
        "owner_pid": _nested("owner_pid_details", "name"),
        "exclusive_consumer_pid": _nested("exclusive_consumer_details", "channel_details"),
        "disk_reads": _nested("message_stats", "disk_reads"),
        "disk_writes": _nested("message_stats", "disk_writes"),
    },
)  # fmt: skip
EXCHANGES = Listing(
    "list_exchanges",
    lambda vhost: (f"Listing exchanges for vhost {vhost} ...",),
    lambda vhost: f"/api/exchanges/{common.quote(vhost)}",
    ("name", "type"),
    {
        **_fields("name", "type", "durable", "auto_delete", "internal", "policy"),
        "arguments": _field("arguments", "pairs"),
    },
)
BINDINGS = Listing(
    "list_bindings",
    lambda vhost: (f"Listing bindings for vhost {vhost}...",),
    lambda vhost: f"/api/bindings/{common.quote(vhost)}",
    (
        "source_name", "source_kind", "destination_name", "destination_kind", "routing_key",
        "arguments",
    ),
    {
        "source_name": _field("source"),
        "source_kind": Column(lambda _item: "exchange"),
        "destination_name": _field("destination"),
        "destination_kind": _field("destination_type"),
        "routing_key": _field("routing_key"),
        "arguments": _field("arguments", "pairs"),
    },
)  # fmt: skip
CONNECTIONS = Listing(
    "list_connections",
    lambda _vhost: ("Listing connections ...",),
    lambda _vhost: "/api/connections",
    ("user", "peer_host", "peer_port", "state"),
    {
        **_fields(
            "name", "user", "vhost", "state", "peer_host", "peer_port", "host", "port", "protocol",
            "channels", "channel_max", "frame_max", "timeout", "ssl", "ssl_protocol",
            "auth_mechanism", "connected_at", "recv_oct", "recv_cnt", "send_oct", "send_cnt",
            "send_pend", "type", "user_who_performed_action", "peer_cert_subject",
            "peer_cert_issuer", "peer_cert_validity", "ssl_key_exchange", "ssl_cipher",
            "ssl_hash",
        ),
        "pid": _field("name"),  # no Erlang pids: the connection's name identifies it
        "client_properties": _field("client_properties", "json"),
    },
)  # fmt: skip
CHANNELS = Listing(
    "list_channels",
    lambda _vhost: ("Listing channels ...",),
    lambda _vhost: "/api/channels",
    ("pid", "user", "consumer_count", "messages_unacknowledged"),
    {
        **_fields(
            "name", "number", "user", "vhost", "transactional", "confirm", "consumer_count",
            "messages_unacknowledged", "messages_uncommitted", "acks_uncommitted",
            "messages_unconfirmed", "prefetch_count", "global_prefetch_count",
        ),
        "pid": _field("name"),
        "connection": _nested("connection_details", "name"),
    },
)  # fmt: skip
CONSUMERS = Listing(
    "list_consumers",
    lambda vhost: (f"Listing consumers in vhost {vhost} ...",),
    lambda vhost: f"/api/consumers/{common.quote(vhost)}",
    (
        "queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count", "active",
        "arguments",
    ),
    {
        **_fields("consumer_tag", "ack_required", "prefetch_count", "active", "exclusive"),
        "queue_name": _nested("queue", "name"),
        "channel_pid": _nested("channel_details", "name"),
        "activity_status": _field("activity_status"),
        "arguments": _field("arguments", "pairs"),
    },
)  # fmt: skip
VHOSTS = Listing(
    "list_vhosts",
    lambda _vhost: ("Listing vhosts ...",),
    lambda _vhost: "/api/vhosts",
    ("name",),
    {
        **_fields("name", "description", "tracing", "default_queue_type"),
        "tags": _field("tags", "tags"),
        "cluster_state": _field("cluster_state", "json"),
    },
)
USERS = Listing(
    "list_users",
    lambda _vhost: ("Listing users ...",),
    lambda _vhost: "/api/users",
    ("user", "tags"),
    {"user": _field("name"), "tags": _field("tags", "tags")},
)


def listing(ctx: Context, args: tuple[str, ...], kind: Listing) -> plans.Plan | plans.Fail:
    """The plan for one listing with the columns asked for (rabbitmqctl's defaults if none)."""
    unknown = [name for name in args if name not in kind.columns]
    if unknown:
        return plans.Fail(exitcodes.USAGE, f"Info key(s) {','.join(unknown)} are not supported")
    names = args or kind.defaults
    columns = [kind.columns[name] for name in names]

    def render(bodies: list[Any]) -> plans.Result:
        items = bodies[-1] if isinstance(bodies[-1], list) else []
        rows = tuple(tuple(column.read(item) for column in columns) for item in items)
        return plans.Table(tuple(names), rows, tuple(column.kind for column in columns))

    step = common.get(kind.path(ctx.vhost), s404=plans.Substitute([]))
    return plans.Plan(kind.banner(ctx.vhost), (step,), render=render)


def _verb(kind: Listing) -> Verb:
    return Verb(
        kind.verb,
        "[-p <vhost>] [<column> ...]",
        lambda ctx, args: listing(ctx, args, kind),
        0,
        -1,
    )


VERBS = tuple(
    _verb(kind) for kind in (QUEUES, EXCHANGES, BINDINGS, CONNECTIONS, CHANNELS, CONSUMERS)
)
