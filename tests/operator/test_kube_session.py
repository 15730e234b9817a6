"""The operator's apiserver session: Kopf's own login, over a bounded connection pool.

Kopf's session has no connection limit: with thousands of objects handled at once every
concurrent PATCH opened a TLS connection of its own, a handshake's CPU on both sides of a
machine the apiserver and the operator share. ``startup.login`` keeps Kopf's credentials and
bounds the pool. Below: the operator's own process-wide clients make a new session on each new
event loop.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import kopf
import kubernetes.client
import pytest
from hutch_operator.core import brokerclient, kube
from hutch_operator.handlers import startup
from kubernetes.config import kube_config

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: operator
  user: {token: "secret-token"}
contexts:
- name: local
  context: {cluster: local, user: operator, namespace: team-a}
current-context: local
"""


async def test_login_keeps_kopfs_credentials_over_a_bounded_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    # The client reads $KUBECONFIG once, at import: point its default at this file.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    # Logging in sets the client's process-wide default configuration: restored afterwards.
    monkeypatch.setattr(kubernetes.client.Configuration, "_default", None)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings = kopf.OperatorSettings()
    expected = kopf.login_via_client(logger=logging.getLogger("test"), settings=settings)
    assert expected is not None
    info = await startup.login(logger=logging.getLogger("test"), settings=settings)
    assert isinstance(info, kopf.AiohttpSession)
    try:
        assert info.server == expected.server == "https://127.0.0.1:6443"
        assert info.priority == expected.priority
        session = info.aiohttp_session
        assert session.headers["Authorization"] == "Bearer secret-token"
        assert session.connector is not None
        assert session.connector.limit == startup.KUBE_CONNECTIONS > 0
    finally:
        await info.aiohttp_session.close()


# -- the process-wide clients across event loops ------------------------------------------------
# ``core.kube.api()`` and ``brokerclient.POOL`` outlive an event loop. When the operator runs
# again on a new loop in the same process after the first loop closed without its cleanup (the
# tests run it in a thread per module, and a stop can outlive its timeout), a session kept from
# the closed loop failed every call with "Event loop is closed": a fresh-clone CI run saw a
# Broker's Secret never read and its Pod never made (2026-11-29). Each client now makes its
# session anew on a loop it was not made on. In memory: no request is sent.


def _session_on_a_new_loop(client: kube.KubeApi | brokerclient.HttpBrokerClient) -> object:
    async def made() -> object:
        session = client._client_session()
        assert session._loop is asyncio.get_running_loop()  # bound to the loop it runs on
        assert client._client_session() is session  # kept while the loop is the same
        return session

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(made())
    finally:
        loop.close()  # closed with the session still open, as an uncleaned stop leaves it


def test_the_kube_client_makes_a_session_for_each_new_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    client = kube.KubeApi()
    first = _session_on_a_new_loop(client)
    second = _session_on_a_new_loop(client)
    assert second is not first


def test_a_broker_client_makes_a_session_and_semaphore_for_each_new_loop() -> None:
    client = brokerclient.HttpBrokerClient("http://127.0.0.1:15672", "guest", "guest")
    first = _session_on_a_new_loop(client)
    semaphore = client._semaphore
    second = _session_on_a_new_loop(client)
    assert second is not first
    assert client._semaphore is not semaphore
