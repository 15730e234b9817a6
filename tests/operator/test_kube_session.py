"""The operator's apiserver session: Kopf's own login, over a bounded connection pool.

Kopf's session has no connection limit: with thousands of objects handled at once every
concurrent PATCH opened a TLS connection of its own, a handshake's CPU on both sides of a
machine the apiserver and the operator share. ``startup.login`` keeps Kopf's credentials and
bounds the pool.
"""

from __future__ import annotations

import logging
from pathlib import Path

import kopf
import kubernetes.client
import pytest
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
