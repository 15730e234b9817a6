"""The operator's process-wide HTTP clients survive the loop they first ran on.

Why: ``core.kube.api()`` and ``brokerclient.POOL`` outlive an event loop. When the operator runs
again on a new loop in the same process after the first loop closed without its cleanup (the
tests run it in a thread per module, and a stop can outlive its timeout), a session kept from
the closed loop failed every call with "Event loop is closed": a fresh-clone CI run saw a
Broker's Secret never read and its Pod never made (2026-11-29). Each client now makes its
session anew on a loop it was not made on. In memory: no request is sent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hutch_operator.core import brokerclient, kube

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
  context: {cluster: local, user: operator}
current-context: local
"""


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
