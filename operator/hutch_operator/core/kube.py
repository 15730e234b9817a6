"""A small async Kubernetes API client for the calls Kopf does not make for us.

Why not the ``kubernetes`` package's sync client in threads: the Broker handler makes a handful
of calls (server-side apply of children, GETs of Secrets) and topology handlers read Secrets by
name; an aiohttp session on the event loop does that without a thread pool, with bounded timeouts,
and with ``application/apply-patch+yaml`` bodies the generated client cannot express. Credentials
still come from the ``kubernetes`` package's loaders (in-cluster token, else KUBECONFIG), so
every auth method it supports works; the token is re-read on each call (bound tokens rotate).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from typing import Any

import aiohttp
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from hutch_operator.core import errors

FIELD_MANAGER = "hutch-operator"
# The socket's connect is bounded on its own (``sock_connect``), and a request's whole life by
# ``total``. Not ``connect``: aiohttp counts in it the wait for a free connection of the pool
# (``POOL``), so a burst of more than ``POOL`` calls (a Broker's children applied while its
# Secrets are read, say) failed its later calls as "cannot connect" although the apiserver
# answered every one of them in time.
TIMEOUT = aiohttp.ClientTimeout(total=30, sock_connect=10)
POOL = 8


def _load_configuration() -> Any:
    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.environ.get("KUBECONFIG") or None, client_configuration=configuration
        )
    return configuration


class KubeApi:
    def __init__(self) -> None:
        self._configuration = _load_configuration()
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one _session is bound to

    def _ssl(self) -> ssl.SSLContext | bool:
        cfg = self._configuration
        if not cfg.verify_ssl:
            return False
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)
        return context

    def _client_session(self) -> aiohttp.ClientSession:
        """The session, made anew when closed or made on another event loop than the running one:
        a session is bound to its loop, and a process can run the operator on a second loop after
        the first one closed without its cleanup (tests run it in a thread per module; a stop
        that outlives its timeout), which would otherwise fail every call with "Event loop is
        closed"."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(ssl=self._ssl(), limit=POOL)
            self._session = aiohttp.ClientSession(connector=connector, timeout=TIMEOUT)
            self._loop = loop
        return self._session

    def _headers(self, content_type: str | None) -> dict[str, str]:
        cfg = self._configuration
        if cfg.refresh_api_key_hook is not None:
            cfg.refresh_api_key_hook(cfg)
        headers = {"Accept": "application/json"}
        token = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers["Authorization"] = token
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str | None = "application/json",
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        url = self._configuration.host.rstrip("/") + path
        data = None if body is None else json.dumps(body)
        try:
            async with self._client_session().request(
                method, url, data=data, params=params, headers=self._headers(content_type)
            ) as response:
                text = await response.text()
                reply = json.loads(text) if text else {}
                if response.status >= 300:
                    message = reply.get("message", text) if isinstance(reply, dict) else text
                    raise errors.KubeError(
                        f"{method} {path}: {response.status} {message}",
                        status=response.status,
                        body=reply,
                    )
                return reply if isinstance(reply, dict) else {}
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.KubeError(f"{method} {path}: {exc!r}") from exc

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None on 404."""
        try:
            return await self.request("GET", path)
        except errors.KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", collection, body)

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply owned by ``hutch-operator``, forcing conflicts (we own children)."""
        return await self.request(
            "PATCH",
            path,
            body,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
        )

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json")

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> None:
        try:
            await self.request("DELETE", path, body)
        except errors.KubeError as exc:
            if exc.status != 404:
                raise

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()


_API: dict[str, KubeApi] = {}


def api() -> KubeApi:
    """The process's client, keyed by KUBECONFIG so tests with another plane get another one."""
    key = os.environ.get("KUBECONFIG", "")
    if key not in _API:
        _API[key] = KubeApi()
    return _API[key]


async def close() -> None:
    apis = list(_API.values())
    _API.clear()
    for instance in apis:
        await instance.close()


def object_path(api_version: str, kind_plural: str, namespace: str, name: str = "") -> str:
    """REST path of a namespaced object (or its collection when ``name`` is empty)."""
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{prefix}/namespaces/{namespace}/{kind_plural}"
    return f"{path}/{name}" if name else path
