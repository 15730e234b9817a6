"""Operator-wide settings and cleanup (design §6).

Kopf's bookkeeping (handler progress, and the last-handled configuration it diffs against) lives
in ``status.kopf``, not in annotations: with status a subresource, annotations and status are
two PATCH requests, while status alone makes a handling cycle one write. At 1,000 Queues that
was a quarter of the apiserver's work (bench/operator_bench.py). Only our explicit
``kopf.info``/``kopf.warn`` calls become Events (no log-to-event posting), and scanning is off,
so the operator needs no list/watch on CRDs or namespaces. The drift sweep is one task for the
whole operator (``sweeping.Sweeper``), started here over Kopf's indexes and stopped at cleanup.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import kopf

from hutch_operator import (
    brokerclient,
    config,
    kopfpatches,
    kube,
    metrics,
    references,
    snapshots,
    sweeping,
)
from hutch_operator.handlers import registration

kopfpatches.apply()  # before kopf.run builds its ToggleSets: a linear start-up with indexes

PREFIX = "hutch.dev"
PROGRESS_FIELD = "status.kopf.progress"
DIFFBASE_FIELD = "status.kopf.lastHandledConfiguration"
LIST_CHUNK = 500


_SWEEPER: list[asyncio.Task[None]] = []


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **indices: Any) -> None:
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field=PROGRESS_FIELD)
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(field=DIFFBASE_FIELD)
    settings.queueing.worker_limit = config.workers()
    settings.queueing.idle_timeout = config.worker_idle_timeout()
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    # The initial LIST in pages: at 10,000 Queues one unpaged answer (tens of MB of JSON, then
    # of dicts) set the operator's peak RSS at restart.
    settings.watching.chunk_size = LIST_CHUNK
    settings.networking.request_timeout = 30
    settings.scanning.disabled = True
    settings.posting.enabled = True
    settings.posting.loggers = False
    settings.peering.priority = random.randint(0, 32767)
    metrics.serve()
    metrics.count_tasks(asyncio.get_running_loop())
    if config.sync_period() > 0:
        sweeper = sweeping.Sweeper(
            registration.views(indices), registration.SWEPT,
            brokers=registration.BROKER_INDEX, vhost_claims=registration.VHOST_CLAIMS,
        )  # fmt: skip
        _SWEEPER.append(asyncio.create_task(sweeper.run(), name="hutch drift sweep"))


@kopf.on.cleanup()
async def close(**_: Any) -> None:
    while _SWEEPER:
        task = _SWEEPER.pop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await brokerclient.POOL.close_all()
    await kube.close()
    snapshots.reset()
    references.forget_secrets()
