"""Prometheus metrics on ``HUTCH_METRICS_PORT`` (default 8080; 0 disables, as in tests)."""

from __future__ import annotations

import asyncio
import os

import prometheus_client

RECONCILES = prometheus_client.Counter(
    "hutch_reconcile_total", "Reconciles by kind and result.", ["kind", "result"]
)
BROKER_REQUESTS = prometheus_client.Counter(
    "hutch_broker_requests_total", "Management API requests.", ["method", "code"]
)
RECONCILE_SECONDS = prometheus_client.Histogram(
    "hutch_reconcile_duration_seconds", "Time spent in one reconcile.", ["kind"]
)
SWEEP_LIST_SECONDS = prometheus_client.Histogram(
    "hutch_sweep_list_seconds", "Time of one listing call of the drift sweep.", ["kind"]
)
DRIFT_CORRECTIONS = prometheus_client.Counter(
    "hutch_drift_corrections_total", "Drift corrected by the sweep.", ["kind"]
)
SWEEP_PASS_SECONDS = prometheus_client.Histogram(
    "hutch_sweep_pass_seconds", "Time of one drift-sweep pass over one (broker, kind).", ["kind"]
)
SWEEP_OBJECTS = prometheus_client.Counter(
    "hutch_sweep_objects_total", "Objects judged by drift-sweep passes.", ["kind"]
)
SWEEP_STATUS_WRITES = prometheus_client.Counter(
    "hutch_sweep_status_writes_total", "Status patches written by drift-sweep passes.", ["kind"]
)
TASKS = prometheus_client.Gauge(
    "hutch_operator_asyncio_tasks",
    "Tasks on the operator's event loop: constant in the number of objects once they settle.",
)

_started = False


def count_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Report ``loop``'s task count on every scrape (asyncio.all_tasks retries a WeakSet that
    changed size under it, so reading from the metrics server's thread is safe)."""
    TASKS.set_function(lambda: len(asyncio.all_tasks(loop)))


def serve() -> None:
    global _started  # noqa: PLW0603 - one HTTP server per process
    port = int(os.environ.get("HUTCH_METRICS_PORT", "8080") or 0)
    if port and not _started:
        prometheus_client.start_http_server(port)
        _started = True
