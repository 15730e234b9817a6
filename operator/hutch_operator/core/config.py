"""Operator settings read from the environment (the chart's ``operator.*`` values set them).

Why one module: handlers, the client pool and the chart must agree on names and defaults, and
tests change them through the environment only. Values are read when asked for, so a test can
point a Broker at a loopback process (``HUTCH_BROKER_ADDRESSES``) after the operator started.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

DEFAULT_BROKER_IMAGE = "hutch-broker:0.1.0"


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    return default if not raw else raw in {"1", "true", "yes", "on"}


def sync_period() -> float:
    """Seconds between two drift-sweep passes over one (broker, kind); 0 turns the sweep off."""
    return _number("HUTCH_SYNC_PERIOD", 300.0)


def workers() -> int | None:
    """Kopf's ``worker_limit``; 0 (the default) means unlimited.

    A limit below the number of objects deadlocks Kopf 1.45 at start-up when indexes are used:
    every worker waits for the indexes to be complete while holding its slot, and the remaining
    objects cannot be indexed without a slot (seen with 16 workers and 1,000 Queues). Broker
    load is bounded by the per-broker connection pool (4) instead.
    """
    value = int(_number("HUTCH_WORKERS", 0))
    return value if value > 0 else None


def worker_idle_timeout() -> float:
    """Seconds a per-object Kopf worker lingers after its last event before freeing its slot.

    Kopf's default (5 s) with ``worker_limit`` 16 caps throughput at ~3 objects/s: every object
    holds a slot for 5 s after it is done. A short linger keeps the limit and the throughput.
    """
    return _number("HUTCH_WORKER_IDLE_TIMEOUT", 0.3)


def delete_timeout() -> float:
    """How long a delete may wait for an unreachable broker before the finalizer is released."""
    return _number("HUTCH_DELETE_TIMEOUT", 300.0)


def connect_timeout() -> float:
    return _number("HUTCH_BROKER_CONNECT_TIMEOUT", 3.0)


def read_timeout() -> float:
    return _number("HUTCH_BROKER_READ_TIMEOUT", 10.0)


def queue_stats() -> bool:
    return _flag("HUTCH_QUEUE_STATS", True)


def broker_status_period() -> float:
    """Seconds between Broker status checks (StatefulSet, aliveness, alarms)."""
    return _number("HUTCH_BROKER_STATUS_PERIOD", 30.0)


def default_broker_image() -> str:
    return os.environ.get("HUTCH_DEFAULT_BROKER_IMAGE", "").strip() or DEFAULT_BROKER_IMAGE


@dataclass(frozen=True)
class BrokerAddress:
    """Where the operator reaches one Broker's listeners (normally its Service DNS name)."""

    management: str
    amqp: str


def broker_address(namespace: str, name: str, *, tls: bool = False) -> BrokerAddress:
    """The Service address (its TLS ports for a Broker with ``spec.tls``), unless
    ``HUTCH_BROKER_ADDRESSES`` overrides it.

    The override (``ns/name=http://127.0.0.1:15672|amqp://127.0.0.1:5672``, comma-separated)
    exists for tests and the quickstart, where brokers are local processes and Service IPs are
    only numbers in etcd (docs/contracts/local-kubernetes.md#fake-addresses).
    """
    override = _overrides(os.environ.get("HUTCH_BROKER_ADDRESSES", "")).get(f"{namespace}/{name}")
    if override is not None:
        return override
    host = f"{name}.{namespace}.svc"
    if tls:
        return BrokerAddress(management=f"https://{host}:15671", amqp=f"amqps://{host}:5671")
    return BrokerAddress(management=f"http://{host}:15672", amqp=f"amqp://{host}:5672")


@functools.lru_cache(maxsize=8)
def _overrides(raw: str) -> dict[str, BrokerAddress]:
    result: dict[str, BrokerAddress] = {}
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        key, _, urls = entry.partition("=")
        management, _, amqp = urls.partition("|")
        result[key.strip()] = BrokerAddress(management=management.rstrip("/"), amqp=amqp)
    return result
