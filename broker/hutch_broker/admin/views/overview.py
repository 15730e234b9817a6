"""``/api/overview`` and ``/api/nodes`` (API-1, API-2): the broker seen as one node.

RabbitMQ reports Erlang VM internals here; Hutch keeps every key a client
might index (the reference key sets) and fills the ones without a Python
equivalent with neutral values.  The numbers that matter for Hutch are the
memory fields (MEM-7: ``mem_limit`` and ``mem_alarm`` change at once after a
watermark PUT) and the object and message totals.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from hutch_broker import __version__
from hutch_broker.admin.views import formatting
from hutch_broker.dispatch.context import Stats
from hutch_broker.model.broker import COMPAT_VERSION
from hutch_broker.model.vhosts import VirtualHost

EXCHANGE_TYPES: Final = (
    ("direct", "AMQP direct exchange, as per the AMQP specification"),
    ("fanout", "AMQP fanout exchange, as per the AMQP specification"),
    ("headers", "AMQP headers exchange, as per the AMQP specification"),
    ("topic", "AMQP topic exchange, as per the AMQP specification"),
)
AUTH_MECHANISMS: Final = (
    ("AMQPLAIN", "QPid AMQPLAIN mechanism"),
    ("PLAIN", "SASL PLAIN authentication mechanism"),
)
NODE_COUNTERS: Final = (
    "gc_num",
    "gc_bytes_reclaimed",
    "context_switches",
    "io_read_count",
    "io_read_bytes",
    "io_read_avg_time",
    "io_write_count",
    "io_write_bytes",
    "io_write_avg_time",
    "io_sync_count",
    "io_sync_avg_time",
    "io_seek_count",
    "io_seek_avg_time",
    "io_reopen_count",
    "mnesia_ram_tx_count",
    "mnesia_disk_tx_count",
    "msg_store_read_count",
    "msg_store_write_count",
    "queue_index_write_count",
    "queue_index_read_count",
    "channel_created",
    "channel_closed",
    "queue_declared",
    "queue_created",
    "queue_deleted",
)


# Erlang internals a node reports as objects; zeros here, so a scraper finds every key (3.10.8).
METRICS_GC_QUEUES: Final = (
    "connection_closed",
    "channel_closed",
    "consumer_deleted",
    "exchange_deleted",
    "queue_deleted",
    "vhost_deleted",
    "node_node_deleted",
    "channel_consumer_deleted",
)
RA_OPEN_FILES: Final = ("ra_log_wal", "ra_log_segment_writer")


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """Facts about this process that the model does not know (the server fills them in)."""

    amqp_port: int | None = 5672  # None: that plain listener is off (TLS only)
    http_port: int | None = 15672
    listen_host: str = "127.0.0.1"
    amqps_port: int | None = None
    https_port: int | None = None
    started_at_ms: int = 0
    data_dir: str = ""
    disk_free_limit: int = 50_000_000
    os_pid: int = field(default_factory=os.getpid)
    processors: int = field(default_factory=lambda: os.cpu_count() or 1)
    # The C extensions this process runs (docs/broker.md "Native code"): each is one of
    # /api/nodes' "applications", so a user can see the fallback to the Python twin.
    native: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSample:
    """Values read at request time (clock, memory monitor, file system)."""

    now_ms: int
    mem_used: int
    mem_limit: int
    mem_alarm: bool
    disk_free: int
    fd_used: int = 0
    fd_total: int = 1024
    connections: int = 0
    connections_opened: int = 0
    connections_closed: int = 0


def _named(entries: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    return [
        {"name": name, "description": description, "enabled": True} for name, description in entries
    ]


def message_stats(stats: Stats) -> dict[str, Any]:
    return formatting.message_stats(
        ack=stats.acks,
        confirm=stats.confirms,
        deliver=stats.deliveries["deliver"],
        deliver_no_ack=stats.deliveries["deliver_no_ack"],
        get=stats.deliveries["get"],
        get_no_ack=stats.deliveries["get_no_ack"],
        get_empty=stats.deliveries["get_empty"],
        drop_unroutable=stats.drops_unroutable,
        deliver_get=stats.delivers,
        publish=stats.publishes,
        redeliver=stats.redelivers,
        return_unroutable=stats.returns,
    )


def queue_totals(vhosts: Iterable[VirtualHost]) -> dict[str, Any]:
    ready = unacked = 0
    for vhost in vhosts:
        for queue in vhost.queues.values():
            ready += queue.ready_count
            unacked += queue.unacked_count
    return formatting.with_details(
        {"messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked}
    )


def object_totals(
    vhosts: Iterable[VirtualHost], *, connections: int, channels: int
) -> dict[str, int]:
    exchanges = queues = consumers = 0
    for vhost in vhosts:
        exchanges += len(vhost.exchanges)
        queues += len(vhost.queues)
        consumers += sum(len(queue.consumers) for queue in vhost.queues.values())
    return {
        "channels": channels,
        "connections": connections,
        "consumers": consumers,
        "exchanges": exchanges,
        "queues": queues,
    }


def listeners(node_name: str, info: NodeInfo) -> list[dict[str, Any]]:
    return [
        {
            "node": node_name,
            "protocol": protocol,
            "ip_address": info.listen_host,
            "port": port,
            "socket_opts": {},
        }
        for protocol, port in (
            ("amqp", info.amqp_port),
            ("amqp/ssl", info.amqps_port),
            ("http", info.http_port),
            ("https", info.https_port),
        )
        if port is not None
    ]


def contexts(node_name: str, info: NodeInfo) -> list[dict[str, Any]]:
    return [
        {
            "ssl_opts": [],
            "node": node_name,
            "description": "RabbitMQ Management",
            "path": "/",
            "ip": info.listen_host,
            "port": str(port),
            **({"ssl": "true"} if port == info.https_port else {}),
        }
        for port in (info.http_port, info.https_port)
        if port is not None
    ]


def overview(
    *,
    cluster_name: str,
    vhosts: Iterable[VirtualHost],
    stats: Stats,
    connections: int,
    channels: int,
    info: NodeInfo,
) -> dict[str, Any]:
    visible = list(vhosts)
    return {
        "management_version": COMPAT_VERSION,
        "rates_mode": "basic",
        "sample_retention_policies": {
            "global": [600, 3600, 28800, 86400],
            "basic": [600, 3600],
            "detailed": [600],
        },
        "exchange_types": _named(EXCHANGE_TYPES),
        "product_version": __version__,
        "product_name": "Hutch",
        "rabbitmq_version": COMPAT_VERSION,
        "cluster_name": cluster_name,
        "erlang_version": sys.version.split()[0],
        "erlang_full_version": f"Python {sys.version}",
        "release_series_support_status": "supported",
        "disable_stats": False,
        "enable_queue_totals": True,
        "message_stats": message_stats(stats),
        "churn_rates": formatting.with_details(
            {
                "channel_closed": 0,
                "channel_created": 0,
                "connection_closed": stats.connections_closed,
                "connection_created": stats.connections_opened,
                "queue_created": 0,
                "queue_declared": 0,
                "queue_deleted": 0,
            }
        ),
        "queue_totals": queue_totals(visible),
        "object_totals": object_totals(visible, connections=connections, channels=channels),
        "statistics_db_event_queue": 0,
        "node": cluster_name,
        "listeners": listeners(cluster_name, info),
        "contexts": contexts(cluster_name, info),
    }


def node(name: str, info: NodeInfo, sample: NodeSample) -> dict[str, Any]:
    """One element of ``/api/nodes`` (the whole of ``/api/nodes/{name}``)."""
    item: dict[str, Any] = {
        "partitions": [],
        "os_pid": str(info.os_pid),
        "fd_total": sample.fd_total,
        "sockets_total": sample.fd_total,
        "mem_limit": sample.mem_limit,
        "mem_alarm": sample.mem_alarm,
        "disk_free_limit": info.disk_free_limit,
        "disk_free_alarm": sample.disk_free < info.disk_free_limit,
        "proc_total": 1048576,
        "rates_mode": "basic",
        "uptime": max(0, sample.now_ms - info.started_at_ms),
        "run_queue": 0,
        "processors": info.processors,
        "exchange_types": _named(EXCHANGE_TYPES),
        "auth_mechanisms": _named(AUTH_MECHANISMS),
        "applications": [
            {"name": "hutch_broker", "description": "Hutch broker", "version": __version__},
            *(
                {"name": name, "description": "Hutch broker, C extension", "version": __version__}
                for name in info.native
            ),
        ],
        "contexts": contexts(name, info),
        "log_files": ["<stdout>"],
        "db_dir": info.data_dir,
        "config_files": [],
        "net_ticktime": 60,
        "enabled_plugins": ["rabbitmq_management"],
        "mem_calculation_strategy": "rss",
        "ra_open_file_metrics": dict.fromkeys(RA_OPEN_FILES, 0),
        "name": name,
        "type": "disc",
        "running": True,
    }
    item.update(
        formatting.with_details(
            {
                "mem_used": sample.mem_used,
                "fd_used": sample.fd_used,
                "sockets_used": sample.connections,
                "proc_used": 0,
                "disk_free": sample.disk_free,
            }
        )
    )
    item.update(formatting.zero_counters(NODE_COUNTERS))
    item.update(
        formatting.with_details(
            {
                "connection_created": sample.connections_opened,
                "connection_closed": sample.connections_closed,
            }
        )
    )
    item["cluster_links"] = []
    item["metrics_gc_queue_length"] = dict.fromkeys(METRICS_GC_QUEUES, 0)
    return item
