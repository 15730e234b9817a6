"""The management-API client: a Protocol for tests and its pooled aiohttp implementation.

Why this shape (docs/contracts/operator.md#layers): MTO's client had no timeouts and a new
connection per call. Here every call is bounded (connect 3 s, read 10 s, total 15 s by
default), each broker gets one keep-alive pool of at most 4 connections shared by every object
that targets it, and HTTP outcomes become the operator's errors in one place. Retrying is
Kopf's job, except one immediate retry when an idle keep-alive connection was reset under an
idempotent request.

An ``https`` management URL is verified against the CA the client was given (``ca_pem``, from
a Broker's TLS Secret or a connection Secret's ``ca.crt``), else the system trust store; a
certificate that does not verify is ``TLSVerificationFailed`` naming the URL, OpenSSL's reason
and the CA that was trusted, never a generic "unavailable".
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from hutch_operator.core import config, errors, metrics

IDEMPOTENT = frozenset({"GET", "PUT", "DELETE", "HEAD"})
CONNECTIONS_PER_BROKER = 4
KEEPALIVE_SECONDS = 30.0
IDLE_SECONDS = 600.0


@dataclass(frozen=True)
class Request:
    """One management-API call: what the translators build and every client sends."""

    method: str
    path: str
    body: dict[str, Any] | None = field(default=None)


class BrokerClient(Protocol):
    """What reconciling needs from a broker: one call shape and the product it is."""

    base_url: str

    async def call(self, request: Request) -> Any: ...

    async def is_hutch(self) -> bool: ...


class HttpBrokerClient:
    """One broker's management API over a private, bounded aiohttp connection pool."""

    def __init__(
        self,
        base_url: str,
        username: str,
        password: str,
        *,
        ca_pem: str = "",
        ca_source: str = "the system trust store",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.ca_pem = ca_pem
        self.ca_source = ca_source
        self.username = username  # a User must never take over the operator's own user
        self.last_used = time.monotonic()
        self.requests = 0
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        self._headers = {"Authorization": f"Basic {token}"}
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one _session is bound to
        self._semaphore = asyncio.Semaphore(CONNECTIONS_PER_BROKER)
        self._product: str | None = None

    def _client_session(self) -> aiohttp.ClientSession:
        """Made anew when closed or bound to another loop than the running one (as
        ``core.kube.KubeApi``'s: the pool outlives an operator loop that closed uncleaned)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            if self._loop is not loop:  # the semaphore binds to its loop too, when contended
                self._semaphore = asyncio.Semaphore(CONNECTIONS_PER_BROKER)
            self._loop = loop
            connector = aiohttp.TCPConnector(
                limit=CONNECTIONS_PER_BROKER,
                keepalive_timeout=KEEPALIVE_SECONDS,
                ssl=self._ssl_context(),
            )
            connect = config.connect_timeout()
            read = config.read_timeout()
            timeout = aiohttp.ClientTimeout(
                total=connect + read + 2, connect=connect, sock_read=read
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, headers=self._headers
            )
        return self._session

    def _ssl_context(self) -> ssl.SSLContext:
        """Verifies the server's chain and name; trusts only ``ca_pem`` when given."""
        try:
            return ssl.create_default_context(cadata=self.ca_pem or None)
        except (ssl.SSLError, ValueError) as exc:
            raise errors.TLSSecretInvalidError(
                f"{self.ca_source}: not a PEM CA certificate ({exc})"
            ) from exc

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def is_hutch(self) -> bool:
        """Whether the in-place argument extension exists (``product_name`` is read once)."""
        if self._product is None:
            overview = await self.call(Request("GET", "/api/overview"))
            self._product = str(overview.get("product_name") or "RabbitMQ")
        return self._product.lower().startswith("hutch")

    async def call(self, request: Request) -> Any:
        self.last_used = time.monotonic()
        attempts = 2 if request.method in IDEMPOTENT else 1
        for attempt in range(attempts):
            try:
                return await self._once(request)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if attempt + 1 == attempts:
                    raise errors.BrokerUnavailableError(
                        f"{self.base_url}: connection lost: {exc}"
                    ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, request: Request) -> Any:
        url = self.base_url + request.path
        try:
            async with (
                self._semaphore,
                self._client_session().request(
                    request.method, url, json=request.body, allow_redirects=False
                ) as response,
            ):
                self.requests += 1
                metrics.BROKER_REQUESTS.labels(request.method, str(response.status)).inc()
                text = await response.text()
                return _outcome(request, response.status, text, self.base_url)
        except aiohttp.ClientConnectorCertificateError as exc:
            raise errors.TLSVerificationFailedError(
                f"{self.base_url}: {_verify_message(exc)}; trusted CA: {self.ca_source}"
            ) from exc
        except aiohttp.ClientSSLError as exc:
            raise errors.TLSHandshakeFailedError(
                f"{self.base_url}: TLS handshake failed: {exc}"
            ) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            raise
        except (aiohttp.ClientError, TimeoutError) as exc:
            detail = type(exc).__name__ if isinstance(exc, TimeoutError) else str(exc)
            raise errors.BrokerUnavailableError(f"{self.base_url}: {detail}") from exc


def _verify_message(exc: aiohttp.ClientConnectorCertificateError) -> str:
    """OpenSSL's words ("certificate verify failed: self-signed certificate in chain")."""
    cause = exc.certificate_error
    if isinstance(cause, ssl.SSLCertVerificationError) and cause.verify_message:
        return f"certificate verify failed: {cause.verify_message}"
    return str(cause)


# Where a 405 means the broker's operator-policy restriction, not a missing method.
OPERATOR_POLICY_PATHS = ("/api/operator-policies/", "/api/parameters/operator_policy/")


def _reason(text: str) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(body, dict):
        return str(body.get("reason") or body.get("error") or body)[:500]
    return str(body)[:500]


class Created:
    """The answer to a write that created its object: 201 with an empty body (RabbitMQ and
    hutch-broker answer 204 when it existed). A Queue created just now has no messages and no
    consumers, which saves reading them back (``handlers.queues.stats``)."""

    def __repr__(self) -> str:
        return "CREATED"


CREATED = Created()


def _outcome(request: Request, status: int, text: str, base: str) -> Any:
    if status < 300:
        if text.strip():
            return json.loads(text)
        return CREATED if status == 201 else None
    where = f"{request.method} {request.path}"
    if status in (401, 403):
        raise errors.AuthenticationFailedError(f"{where}: {status} {_reason(text)}")
    if status == 404:
        raise errors.ObjectNotFoundError(f"{where}: 404 {_reason(text)}")
    if status >= 500:
        raise errors.BrokerUnavailableError(f"{base} {where}: {status} {_reason(text)}")
    if status == 405 and request.path.startswith(OPERATOR_POLICY_PATHS):
        raise errors.OperatorPolicyChangesDisabledError(
            f"{where}: 405: the broker's config sets "
            "management.restrictions.operator_policy_changes.disabled = true, so operator "
            "policies cannot change over HTTP; remove that line from the Broker's "
            "spec.additionalConfig to let this OperatorPolicy apply",
            status=status,
        )
    raise errors.BrokerRejectedError(f"{where}: {status} {_reason(text)}", status=status)


class ClientPool:
    """One client per (base URL, user, sha256(password, CA)); idle ones closed after 10 min."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str, str], HttpBrokerClient] = {}

    def get(
        self,
        base_url: str,
        username: str,
        password: str,
        *,
        ca_pem: str = "",
        ca_source: str = "the system trust store",
    ) -> HttpBrokerClient:
        secret = hashlib.sha256(f"{password}\0{ca_pem}".encode()).hexdigest()
        key = (base_url, username, secret)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = HttpBrokerClient(
                base_url, username, password, ca_pem=ca_pem, ca_source=ca_source
            )
        return client

    async def drop(self, client: BrokerClient) -> None:
        for key, known in list(self._clients.items()):
            if known is client:
                del self._clients[key]
                await known.close()

    async def close_idle(self) -> None:
        cutoff = time.monotonic() - IDLE_SECONDS
        for client in [c for c in self._clients.values() if c.last_used < cutoff]:
            await self.drop(client)

    async def close_all(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


POOL = ClientPool()
