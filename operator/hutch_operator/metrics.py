"""Prometheus metrics on ``HUTCH_METRICS_PORT`` (default 8080; 0 disables, as in tests)."""

from __future__ import annotations

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

_started = False


def serve() -> None:
    global _started  # noqa: PLW0603 - one HTTP server per process
    port = int(os.environ.get("HUTCH_METRICS_PORT", "8080") or 0)
    if port and not _started:
        prometheus_client.start_http_server(port)
        _started = True
