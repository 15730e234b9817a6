"""The operator's own apiserver client: a call that waits for a pooled connection is not a failed connect.

aiohttp's ``connect`` timeout counts the wait for a free connection of the pool, so with the
pool's eight connections busy, a ninth call failed as "cannot connect" after ``connect``
seconds although the server answered every call. ``kube.TIMEOUT`` bounds the socket's connect
(``sock_connect``) and the whole call (``total``) instead. Shown with a real HTTP server whose
every answer takes longer than the connect bound, called twice as many times as the pool holds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from hutch_operator.core import kube

pytestmark = pytest.mark.broker  # a real HTTP server on loopback

ANSWER_DELAY = 0.4  # longer than the connect bound below, shorter than the total


async def _slow_server() -> tuple[web.AppRunner, int, list[int]]:
    in_flight = [0, 0]  # now, most at once

    async def handler(request: web.Request) -> web.Response:
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            await asyncio.sleep(ANSWER_DELAY)
        finally:
            in_flight[0] -= 1
        return web.json_response({"kind": "Secret", "metadata": {"name": request.match_info["n"]}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/secrets/{n}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port, in_flight


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return path


def _write(path: Path, port: int) -> None:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )


async def _burst(path: Path, bounds: aiohttp.ClientTimeout) -> tuple[int, list[str], int]:
    runner, port, in_flight = await _slow_server()
    _write(path, port)
    api = kube.KubeApi()
    original = kube.TIMEOUT
    kube.TIMEOUT = bounds
    try:
        calls = [api.get(f"/api/v1/namespaces/ns/secrets/s{i}") for i in range(2 * kube.POOL)]
        results = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        kube.TIMEOUT = original
        await api.close()
        await runner.cleanup()
    answered = sum(1 for r in results if isinstance(r, dict))
    failures = [str(r) for r in results if isinstance(r, BaseException)]
    return answered, failures, in_flight[1]


async def test_calls_beyond_the_pool_wait_for_a_connection_and_are_answered(
    kubeconfig: Path,
) -> None:
    # The production bounds scaled down: the socket connect 0.2 s, the whole call 10 s.
    scaled = aiohttp.ClientTimeout(
        total=10 * kube.TIMEOUT.total / 30, sock_connect=kube.TIMEOUT.sock_connect / 50
    )
    assert kube.TIMEOUT.connect is None, "a pool wait must not count as a connect"
    answered, failures, most = await _burst(kubeconfig, scaled)
    assert failures == []
    assert answered == 2 * kube.POOL
    assert most == kube.POOL  # the pool still bounds the calls in flight


async def test_the_old_connect_bound_failed_the_calls_that_waited(kubeconfig: Path) -> None:
    """The same burst under ``connect`` (the bound this replaced): the waiting half fails."""
    answered, failures, _ = await _burst(kubeconfig, aiohttp.ClientTimeout(total=10, connect=0.2))
    assert answered == kube.POOL
    assert len(failures) == kube.POOL
    assert all("GET /api/v1/namespaces/ns/secrets/" in f for f in failures)
