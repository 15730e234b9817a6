"""A tiny management-API client (standard library only) for tests against either broker.

Why: the semantics and side-by-side tests set policies, read queue state and flip the memory
watermark over HTTP on hutch-broker and on the reference RabbitMQ alike. Errors are data here, not
exceptions: a test asserts the status and the body RabbitMQ-compatible clients would see.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, Unpack

from hutch_demo import probes


@dataclass(frozen=True)
class Response:
    status: int
    body: Any  # decoded JSON, the raw text when it is not JSON, None when empty

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class HttpReachable(Protocol):
    """A broker's management API: its URL and the credentials to use there."""

    @property
    def http_url(self) -> str: ...

    @property
    def credentials(self) -> tuple[str, str]: ...


class PolicyOptions(TypedDict, total=False):
    """``put_policy``'s keyword arguments, as ``set_policy`` passes them on."""

    priority: int
    apply_to: str
    vhost: str
    operator: bool


def quote(name: str) -> str:
    """A path segment as the management API expects it (`/` is `%2F`)."""
    return urllib.parse.quote(name, safe="")


class Management:
    """Requests with basic auth to ``broker.http_url`` (anything with ``http_url`` and
    ``credentials``; over HTTPS with its ``ssl_context`` when it has one)."""

    def __init__(self, broker: HttpReachable, *, timeout: float = 10.0) -> None:
        self.base = broker.http_url
        self.auth = probes.basic_auth(*broker.credentials)
        self.timeout = timeout
        self.context = getattr(broker, "ssl_context", None)

    def on_port(self, port: int) -> Management:
        """The same broker's API on another port of its host, with the same credentials: a
        vhost worker's (``hutch-broker --vhost-workers``: worker i on http-port + i)."""
        other = copy.copy(self)
        parts = urllib.parse.urlsplit(self.base)
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
        other.base = parts._replace(netloc=f"{host}:{port}").geturl()
        return other

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Response:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - loopback http URL built by the fixture
            self.base + "/api" + path,
            data=data,
            method=method,
            headers={
                "Authorization": self.auth, "Content-Type": "application/json", **(headers or {})
            },
        )  # fmt: skip
        try:
            with urllib.request.urlopen(  # noqa: S310
                request, timeout=self.timeout, context=self.context
            ) as reply:
                return Response(reply.status, _decode(reply.read()))
        except urllib.error.HTTPError as error:
            return Response(error.code, _decode(error.read()))

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def put(self, path: str, body: Any) -> Response:
        return self.request("PUT", path, body)

    def post(self, path: str, body: Any) -> Response:
        return self.request("POST", path, body)

    def delete(self, path: str) -> Response:
        return self.request("DELETE", path)

    # -- shortcuts for the objects the tests touch most ------------------------------------------

    def queue(self, name: str, vhost: str = "/") -> dict[str, Any]:
        """``GET /api/queues/{vhost}/{name}``; fails the test when it is missing."""
        response = self.get(f"/queues/{quote(vhost)}/{quote(name)}")
        if response.status != 200 or not isinstance(response.body, dict):
            raise AssertionError(f"queue {name!r} in vhost {vhost!r}: {response}")
        return response.body

    def queue_exists(self, name: str, vhost: str = "/") -> bool:
        return self.get(f"/queues/{quote(vhost)}/{quote(name)}").status == 200

    def put_policy(
        self,
        name: str,
        pattern: str,
        definition: dict[str, Any],
        *,
        priority: int = 0,
        apply_to: str = "queues",
        vhost: str = "/",
        operator: bool = False,
    ) -> Response:
        kind = "operator-policies" if operator else "policies"
        body = {
            "pattern": pattern,
            "definition": definition,
            "priority": priority,
            "apply-to": apply_to,
        }
        return self.put(f"/{kind}/{quote(vhost)}/{quote(name)}", body)

    def set_policy(
        self,
        name: str,
        pattern: str,
        definition: dict[str, Any],
        **kwargs: Unpack[PolicyOptions],
    ) -> None:
        """``put_policy`` that must succeed (201 or 204)."""
        response = self.put_policy(name, pattern, definition, **kwargs)
        if response.status not in (201, 204):
            raise AssertionError(f"policy {name!r} refused: {response}")

    def delete_policy(self, name: str, *, vhost: str = "/", operator: bool = False) -> Response:
        kind = "operator-policies" if operator else "policies"
        return self.delete(f"/{kind}/{quote(vhost)}/{quote(name)}")


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text
