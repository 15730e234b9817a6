"""``/api/queues`` items (API-7): counts, policies and consumers of one queue.

``messages`` is ready + unacked; ``effective_policy_definition`` is the
merged user and operator policy *without* the queue's arguments (POL-6), so
a queue with ``x-max-length: 10`` under an operator ``max-length: 3`` shows
both numbers, as RabbitMQ does.  Erlang internals (``backing_queue_status``,
``garbage_collection``, ``reductions``) are left out, which
docs/contracts/broker.md#http-api allows.

``memory`` is what the queue holds in this process: its own structures, each message's entry
(``ENTRY_OVERHEAD``) and the bodies and headers that are resident. A paged-out or recovered body
sits in the store and is not counted; ``message_bytes*`` keep the body totals. Summing body bytes
there once reported 1.3 GB for a queue of a 256 MiB broker whose bodies were mostly paged out.
RabbitMQ 3.10.8 reports its queue process's heap, where bodies over 64 bytes are not (they are
shared binaries): 13,568 bytes empty, 1.3 MB for 2,000 messages whether of 100 B or 8 KiB.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from hutch_broker.admin.views import connections, formatting
from hutch_broker.model import settings
from hutch_broker.model.queues import Consumer, Queue
from hutch_broker.model.streams import StreamQueue


def policy_name(policy: Any) -> str | None:
    return None if policy is None else str(policy.name)


def effective_policy_definition(queue: Queue) -> dict[str, Any]:
    return settings.merge_policies(
        queue.policy.definition if queue.policy is not None else None,
        queue.operator_policy.definition if queue.operator_policy is not None else None,
    )


#: A queue's own structures (its object, dicts, ready list), measured with tracemalloc: 4,108 B.
QUEUE_OVERHEAD: Final = 4096
#: One queued message beside its body and header bytes: its ``Entry`` and ``Message``, the two
#: bytes objects' own headers and its slot in the ready list (tracemalloc: 283 B).
ENTRY_OVERHEAD: Final = 288


def _ready_scan(queue: Queue) -> tuple[int, int, int]:
    """(count, body bytes) of persistent ready messages and the bytes of bodies and headers the
    ready messages hold in memory: one pass over the queue."""
    count = size = resident = 0
    for entry in queue.ready_entries():
        message = entry.message
        resident += len(message.body) + len(message.raw_properties)
        if message.persistent:
            count += 1
            size += entry.size
    return count, size, resident


def queue_memory(queue: Queue, resident_ready: int) -> int:
    """Bytes the queue holds in memory: its structures, every message's entry, the ready
    messages' resident bodies and headers, and the unacked bodies (a channel keeps those for
    redelivery; one of 4 KiB or more that the store holds is dropped once sent, which this
    does not see, so it is counted whole). Paged-out bodies are not in memory: not counted."""
    entries = queue.ready_count + queue.unacked_count
    return QUEUE_OVERHEAD + entries * ENTRY_OVERHEAD + resident_ready + queue.unacked_bytes


def _counts(queue: Queue) -> dict[str, Any]:
    ready, unacked = queue.ready_count, queue.unacked_count
    ready_bytes, unacked_bytes = queue.ready_bytes, queue.unacked_bytes
    persistent, persistent_bytes, resident = _ready_scan(queue)
    paged, paged_bytes = queue.paged_out
    counts: dict[str, Any] = {
        "memory": queue_memory(queue, resident),
        "message_bytes": ready_bytes + unacked_bytes,
        "message_bytes_paged_out": paged_bytes,
        "message_bytes_persistent": persistent_bytes,
        "message_bytes_ram": ready_bytes + unacked_bytes - paged_bytes,
        "message_bytes_ready": ready_bytes,
        "message_bytes_unacknowledged": unacked_bytes,
        "messages_paged_out": paged,
        "messages_persistent": persistent,
        "messages_ram": ready + unacked - paged,
        "messages_ready_ram": ready - paged,
        "messages_unacknowledged_ram": unacked,
    }
    counts.update(
        formatting.with_details(
            {
                "messages": ready + unacked,
                "messages_ready": ready,
                "messages_unacknowledged": unacked,
            }
        )
    )
    return counts


DELIVERY_STATS = ("deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty")


def _message_stats(queue: Queue) -> dict[str, Any]:
    """RabbitMQ shows ``publish`` once a message arrived, and the whole delivery group
    (deliver, get, their no-ack forms, get_empty, deliver_get, redeliver, ack) once any of
    them happened: rabbitmqadmin and dashboards index those keys."""
    stats = formatting.activity({"publish": queue.stats_publish})
    deliveries = {name: queue.stats_deliveries[name] for name in DELIVERY_STATS}
    stats.update(
        formatting.activity(
            deliveries
            | {
                "deliver_get": queue.stats_deliver,
                "ack": queue.stats_ack,
                "redeliver": queue.stats_redeliver,
            }
        )
    )
    return stats


def _exclusive_consumer_tag(queue: Queue) -> str | None:
    for consumer in queue.consumers:
        if consumer.exclusive:
            return consumer.tag
    return None


def _single_active_consumer_tag(queue: Queue) -> str | None:
    active = queue.consumers.active
    return active.tag if active is not None else None


def _activity_status(consumer: Consumer) -> str:
    """RabbitMQ 3.10.8: "up" without single active consumer, else "single_active" or "waiting"."""
    consumers = consumer.queue.consumers
    if not consumers.single_active:
        return "up"
    return "single_active" if consumers.is_active(consumer) else "waiting"


def queue_item(queue: Queue, *, node: str) -> dict[str, Any]:
    consumers = len(queue.consumers)
    item: dict[str, Any] = {
        "arguments": formatting.jsonable(queue.arguments),
        "auto_delete": queue.auto_delete,
        "consumer_capacity": 1.0 if consumers else 0,
        "consumer_utilisation": 1.0 if consumers else 0,
        "consumers": consumers,
        "durable": queue.durable,
        "effective_policy_definition": formatting.jsonable(effective_policy_definition(queue)),
        "exclusive": queue.exclusive_owner is not None,
        "exclusive_consumer_tag": _exclusive_consumer_tag(queue),
        "head_message_timestamp": None,
        "name": queue.name,
        "node": node,
        "operator_policy": policy_name(queue.operator_policy),
        "policy": policy_name(queue.policy),
        "recoverable_slaves": None,
        "single_active_consumer_tag": _single_active_consumer_tag(queue),
        "state": "running",
        "type": "quorum" if queue.quorum else "classic",
        "vhost": queue.vhost,
    }
    stats = _message_stats(queue)
    if stats:
        item["message_stats"] = stats
    # RabbitMQ sets idle_since whenever the queue process is idle, consumers or not; a queue
    # here does work only inside a request, so it is always idle when the API looks.
    item["idle_since"] = formatting.iso_time(queue.last_used_ms)
    item.update(_counts(queue))
    if queue.quorum:
        _as_quorum(item, node)
    elif isinstance(queue, StreamQueue):
        _as_stream(item, queue, node)
    return item


# Classic-queue fields a 3.10.8 quorum queue does not report (its consumer tag is ``_ctag``).
_CLASSIC_ONLY = (
    "exclusive_consumer_tag",
    "head_message_timestamp",
    "idle_since",
    "message_bytes_paged_out",
    "messages_paged_out",
    "messages_ready_ram",
    "messages_unacknowledged_ram",
    "recoverable_slaves",
)


def _as_quorum(item: dict[str, Any], node: str) -> None:
    """A quorum queue's fields: one replica, so this node leads and is every member."""
    for key in _CLASSIC_ONLY:
        item.pop(key, None)
    item["single_active_consumer_ctag"] = item.pop("single_active_consumer_tag")
    item.update(
        {
            "leader": node,
            "members": [node],
            "online": [node],
            "open_files": {node: 0},
            "messages_dlx": 0,  # none wait for at-least-once dead-lettering: it happens at once
            "message_bytes_dlx": 0,
        }
    )


# The fields of a 3.10.8 stream's item (observed), the rest are a classic queue's.
_STREAM_FIELDS: Final = frozenset(
    {
        "arguments", "auto_delete", "consumers", "durable", "effective_policy_definition",
        "exclusive", "memory", "message_stats", "messages", "messages_details",
        "messages_ready", "messages_ready_details", "messages_unacknowledged",
        "messages_unacknowledged_details", "name", "node", "operator_policy", "policy", "state",
        "type", "vhost",
    }
)  # fmt: skip
#: A stream's own structures (its object, index, cursors); its messages are on disk only.
SEGMENT_OVERHEAD: Final = 160


def _as_stream(item: dict[str, Any], queue: StreamQueue, node: str) -> None:
    """A stream's fields: 3.10.8's (every message is ready; an unacked one stays in the log),
    plus Hutch's ``first_offset``, ``last_offset`` (null while none is durable),
    ``next_offset`` and ``segments``, so a reader can plan a range without consuming."""
    for key in [key for key in item if key not in _STREAM_FIELDS]:
        del item[key]
    count = queue.ready_count
    item.update(formatting.with_details({"messages": count, "messages_ready": count}))
    item.update(formatting.with_details({"messages_unacknowledged": 0}))
    item.update(
        {
            "type": "stream",
            "memory": QUEUE_OVERHEAD + SEGMENT_OVERHEAD * len(queue.index),
            "members": [node],
            "online": [node],
            "readers": {node: len(queue.consumers)},
            "first_offset": queue.first_offset,
            "last_offset": queue.last_offset,
            "next_offset": queue.visible_end,
            "segments": len(queue.index),
        }
    )


def _channel_details(consumer: Consumer, *, node: str, local_address: str) -> dict[str, Any]:
    channel = consumer.channel
    if not isinstance(channel, connections.ConnectedChannel):  # a model-only consumer
        return {}
    session = channel.session
    item = connections.channel_item(session, channel, node=node, local_address=local_address)
    return {
        "connection_name": item["connection_details"]["name"],
        "name": item["name"],
        "node": node,
        "number": item["number"],
        "peer_host": session.peer_host,
        "peer_port": session.peer_port,
        "user": item["user"],
    }


def consumer_item(consumer: Consumer, *, node: str, local_address: str) -> dict[str, Any]:
    """One entry of ``consumer_details``; channel facts come from the dispatch channel."""
    return {
        "arguments": formatting.jsonable(consumer.arguments),
        "ack_required": not consumer.no_ack,
        "active": consumer.queue.consumers.is_active(consumer),
        "activity_status": _activity_status(consumer),
        "channel_details": _channel_details(consumer, node=node, local_address=local_address),
        "consumer_tag": consumer.tag,
        "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch,
        "queue": {"name": consumer.queue.name, "vhost": consumer.queue.vhost},
    }


def queue_detail(queue: Queue, *, node: str, local_address: str) -> dict[str, Any]:
    """The single-queue form adds consumer details and (empty) per-link rate lists."""
    item = queue_item(queue, node=node)
    item["consumer_details"] = [
        consumer_item(consumer, node=node, local_address=local_address)
        for consumer in queue.consumers
    ]
    item["deliveries"] = []
    item["incoming"] = []
    return item


# The item keys a listing reads straight from the queue, so a page renders only itself
# (``paced.Fields``): ``vhost`` and ``name`` are the default sort.
FIELDS: Final[Mapping[str, Callable[[Queue], Any]]] = {
    "name": lambda queue: queue.name,
    "vhost": lambda queue: queue.vhost,
}
