"""Operator-wide settings and cleanup (docs/contracts/operator.md#kopf-settings).

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
import warnings
from typing import Any

import aiohttp
import kopf

from hutch_operator.core import brokerclient, config, kopfpatches, kube, metrics, references
from hutch_operator.topology import snapshots, sweeping
from hutch_operator.topology.handlers import registration

kopfpatches.apply()  # before kopf.run builds its ToggleSets: a linear start-up with indexes

PREFIX = "hutch.dev"
PROGRESS_FIELD = "status.kopf.progress"
DIFFBASE_FIELD = "status.kopf.lastHandledConfiguration"
LIST_CHUNK = 500


_SWEEPER: list[asyncio.Task[None]] = []

# Connections to the apiserver: Kopf's watch streams hold one each for their lifetime (about a
# dozen), requests share the rest.
KUBE_CONNECTIONS = 64


@kopf.on.login()
async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
    """Kopf's own login (kubeconfig, else the Pod's service account), over a bounded pool.

    Why: Kopf's session has no connection limit, so when thousands of objects are handled at
    once every concurrent PATCH opened a TLS connection of its own, and each handshake costs
    CPU on both sides of a machine whose cores the apiserver and the operator share. With a
    bound, requests wait for a pooled connection instead; the handshakes are bounded by the pool.
    """
    info = kopf.login_via_client(**kwargs)
    if info is None:
        return None
    with warnings.catch_warnings():  # as Kopf does: aiohttp deprecates BasicAuth in sessions
        warnings.simplefilter("ignore", DeprecationWarning)
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=KUBE_CONNECTIONS, ssl=info.as_ssl_context()),
            headers=info.as_http_headers(),
            auth=info.as_aiohttp_basic_auth(),
            trust_env=info.trust_env,
        )
    return kopf.AiohttpSession(
        server=info.server,
        default_namespace=info.default_namespace,
        expiration=info.expiration,
        priority=info.priority,
        aiohttp_session=session,
    )


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
