"""``/api/vhosts`` items (API-3).

The list form carries message totals, the single form does not, exactly as
RabbitMQ 3.10.8 answers (``GET_vhosts.json`` / ``GET_vhosts_mgmt-vh.json``).
"""

from __future__ import annotations

from typing import Any

from hutch_broker.admin.views import formatting
from hutch_broker.model.vhosts import VirtualHost


def vhost_item(vhost: VirtualHost, *, node: str) -> dict[str, Any]:
    return {
        "name": vhost.name,
        "description": vhost.description,
        "tags": list(vhost.tags),
        "default_queue_type": vhost.default_queue_type,
        "metadata": {"description": vhost.description, "tags": list(vhost.tags)},
        "tracing": False,
        "cluster_state": formatting.node_state(node),
    }


def _queue_counters(vhost: VirtualHost) -> dict[str, int]:
    counters = dict.fromkeys(("ready", "unacked", "publish", "deliver_get", "ack", "redeliver"), 0)
    for queue in vhost.queues.values():
        counters["ready"] += queue.ready_count
        counters["unacked"] += queue.unacked_count
        counters["publish"] += queue.stats_publish
        counters["deliver_get"] += queue.stats_deliver
        counters["ack"] += queue.stats_ack
        counters["redeliver"] += queue.stats_redeliver
    return counters


def vhost_list_item(vhost: VirtualHost, *, node: str) -> dict[str, Any]:
    """The list form adds message totals and statistics summed over the vhost's queues."""
    counters = _queue_counters(vhost)
    ready, unacked = counters.pop("ready"), counters.pop("unacked")
    item = vhost_item(vhost, node=node)
    item["message_stats"] = formatting.message_stats(deliver=counters["deliver_get"], **counters)
    item.update(
        formatting.with_details(
            {
                "messages": ready + unacked,
                "messages_ready": ready,
                "messages_unacknowledged": unacked,
            }
        )
    )
    item.update(formatting.with_details({"recv_oct": 0, "send_oct": 0}))
    return item
