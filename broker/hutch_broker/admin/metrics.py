"""``GET /metrics`` (API-14): Prometheus text with rabbitmq_prometheus metric names.

Dashboards and alerts written for RabbitMQ (``rabbitmq_queue_messages_ready``,
``rabbitmq_alarms_memory_used_watermark`` …) keep working against Hutch.
Metrics are computed from the model at scrape time, never stored, so a
scrape costs one pass over the queues.  Like rabbitmq_prometheus, the
endpoint needs no authentication; unlike its default endpoint, per-queue
series are included.  With 5,000 queues one scrape is a quarter of a second
of work, and anybody may ask for it, so the server renders it with
``render_paced``: the queues' values are read in slices, and the per-queue
series are written a hundred queues at a time by prometheus_client itself, so
the text is exactly ``render``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from hutch_broker.admin import paced
from hutch_broker.admin.memory import MemoryMonitor
from hutch_broker.admin.state import WriteCounter
from hutch_broker.dispatch.context import Context

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
QUEUE_LABELS = ["vhost", "queue"]


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def object_families(context: Context) -> list[Any]:
    vhosts = list(context.broker.vhosts.values())
    queues = [queue for vhost in vhosts for queue in vhost.queues.values()]
    return [
        _gauge("rabbitmq_connections", "Connections currently open", len(context.sessions)),
        _gauge("rabbitmq_channels", "Channels currently open", context.channel_count),
        _gauge("rabbitmq_queues", "Queues available", len(queues)),
        _gauge(
            "rabbitmq_consumers",
            "Consumers currently connected",
            sum(len(queue.consumers) for queue in queues),
        ),
    ]


def queue_families(context: Context) -> list[Any]:
    ready = GaugeMetricFamily(
        "rabbitmq_queue_messages_ready",
        "Messages ready to be delivered to consumers",
        labels=QUEUE_LABELS,
    )
    unacked = GaugeMetricFamily(
        "rabbitmq_queue_messages_unacked",
        "Messages delivered to consumers but not yet acknowledged",
        labels=QUEUE_LABELS,
    )
    total = GaugeMetricFamily(
        "rabbitmq_queue_messages",
        "Sum of ready and unacknowledged messages",
        labels=QUEUE_LABELS,
    )
    consumers = GaugeMetricFamily(
        "rabbitmq_queue_consumers", "Consumers on a queue", labels=QUEUE_LABELS
    )
    for vhost in context.broker.vhosts.values():
        for queue in vhost.queues.values():
            labels = [vhost.name, queue.name]
            ready.add_metric(labels, queue.ready_count)
            unacked.add_metric(labels, queue.unacked_count)
            total.add_metric(labels, queue.ready_count + queue.unacked_count)
            consumers.add_metric(labels, len(queue.consumers))
    return [ready, unacked, total, consumers]


def counter_families(context: Context) -> list[Any]:
    stats = context.stats
    return [
        _counter(
            "rabbitmq_connections_opened", "Total connections opened", stats.connections_opened
        ),
        _counter(
            "rabbitmq_connections_closed", "Total connections closed", stats.connections_closed
        ),
        _counter(
            "rabbitmq_global_messages_received",
            "Total messages received from publishers",
            stats.publishes,
        ),
        _counter(
            "rabbitmq_global_messages_delivered",
            "Total messages delivered to consumers",
            stats.delivers,
        ),
        _counter(
            "rabbitmq_global_messages_acknowledged", "Total messages acknowledged", stats.acks
        ),
        _counter(
            "rabbitmq_global_messages_confirmed",
            "Total messages confirmed to publishers",
            stats.confirms,
        ),
        _counter(
            "rabbitmq_global_messages_redelivered", "Total messages redelivered", stats.redelivers
        ),
        _counter(
            "rabbitmq_global_messages_unroutable_returned",
            "Total unroutable messages returned to publishers",
            stats.returns,
        ),
    ]


def memory_families(memory: MemoryMonitor) -> list[Any]:
    return [
        _gauge("rabbitmq_process_resident_memory_bytes", "Memory used in bytes", memory.mem_used),
        _gauge(
            "rabbitmq_resident_memory_limit_bytes",
            "Memory high watermark in bytes",
            memory.mem_limit,
        ),
        _gauge(
            "rabbitmq_alarms_memory_used_watermark",
            "is 1 if VM memory watermark threshold is reached",
            1 if memory.alarm else 0,
        ),
    ]


def write_families(writes: WriteCounter) -> list[Any]:
    family = CounterMetricFamily(
        "hutch_management_writes",
        "Management API requests that may change state, by method, route and status class",
        labels=["method", "route", "code"],
    )
    for (method, route, code), count in sorted(writes.counts.items()):
        family.add_metric([method, route, code], count)
    return [family]


class _Collector:
    def __init__(self, context: Context, memory: MemoryMonitor, writes: WriteCounter) -> None:
        self.context = context
        self.memory = memory
        self.writes = writes

    def collect(self) -> Iterator[Any]:
        yield from object_families(self.context)
        yield from queue_families(self.context)
        yield from counter_families(self.context)
        yield from memory_families(self.memory)
        yield from write_families(self.writes)


QUEUES_PER_STEP: Final = 100
Row = tuple[str, str, int, int, int]  # vhost, queue, ready, unacked, consumers
_QUEUE_SERIES: Final[tuple[tuple[str, str, Callable[[Row], int]], ...]] = (
    (
        "rabbitmq_queue_messages_ready",
        "Messages ready to be delivered to consumers",
        lambda r: r[2],
    ),
    (
        "rabbitmq_queue_messages_unacked",
        "Messages delivered to consumers but not yet acknowledged",
        lambda r: r[3],
    ),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages", lambda r: r[2] + r[3]),
    ("rabbitmq_queue_consumers", "Consumers on a queue", lambda r: r[4]),
)


class _Families:
    def __init__(self, families: Iterable[Any]) -> None:
        self.families = families

    def collect(self) -> Iterable[Any]:
        return self.families


async def render_paced(
    context: Context, memory: MemoryMonitor, writes: WriteCounter, pacer: paced.Pacer
) -> bytes:
    """``render``'s text, built in slices: one read of every queue's values (so the four
    per-queue series agree), then the series ``QUEUES_PER_STEP`` queues at a time."""
    queues = [
        (vhost.name, queue)
        for vhost in context.broker.vhosts.values()
        for queue in list(vhost.queues.values())
    ]
    rows: list[Row] = await pacer.map(
        lambda pair: (
            pair[0],
            pair[1].name,
            pair[1].ready_count,
            pair[1].unacked_count,
            len(pair[1].consumers),
        ),
        queues,
    )
    parts = [generate_latest(_Families(object_families(context)))]
    for name, documentation, value in _QUEUE_SERIES:
        for start in range(0, max(len(rows), 1), QUEUES_PER_STEP):
            family = GaugeMetricFamily(name, documentation, labels=QUEUE_LABELS)
            for row in rows[start : start + QUEUES_PER_STEP]:
                family.add_metric([row[0], row[1]], value(row))
            text: bytes = generate_latest(_Families([family]))
            parts.append(text if start == 0 else text.split(b"\n", 2)[2])  # HELP, TYPE once
            await pacer.tick()
    rest = [*counter_families(context), *memory_families(memory), *write_families(writes)]
    parts.append(generate_latest(_Families(rest)))
    return b"".join(parts)


def render(context: Context, memory: MemoryMonitor, writes: WriteCounter) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(context, memory, writes))
    output: bytes = generate_latest(registry)
    return output
