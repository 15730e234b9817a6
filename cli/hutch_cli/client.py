"""The management API over HTTP or HTTPS, standard library only: the one module doing network I/O.

Why the standard library: hutchctl must run from the base wheel with nothing extra installed (in a
broker image, on a laptop next to a port-forward). Why no proxies: the management port is reached
directly or through ``kubectl port-forward`` on loopback, where an ``http_proxy`` set for the
internet would only get in the way. Reusable by other front ends (``kubectl hutch ctl``): build an
``Endpoint`` and call ``Client(endpoint).send(request)``.
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from hutch_cli import plans, transport


@dataclass(frozen=True)
class Endpoint:
    url: str  # http(s)://host:port of the management API, no trailing /api
    username: str
    password: str
    cacert: str | None = None  # a PEM file of CAs to trust for https, else the system's
    timeout: float = 60.0
    # The name to verify in the broker's certificate (and send as SNI) when it is not the URL's
    # host: a port-forward on localhost to a broker whose certificate names its Service.
    server_name: str | None = None


class Client:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if endpoint.url.startswith("https:"):
            context = ssl.create_default_context(cafile=endpoint.cacert)
            if endpoint.server_name:
                handlers.append(_NamedHTTPSHandler(context, endpoint.server_name))
            else:
                handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)
        token = f"{endpoint.username}:{endpoint.password}".encode()
        self._authorization = "Basic " + base64.b64encode(token).decode("ascii")

    def send(self, request: plans.Request) -> transport.Response:
        data = None if request.body is None else json.dumps(request.body).encode()
        outgoing = urllib.request.Request(  # noqa: S310 - the URL scheme is checked in settings
            self.endpoint.url.rstrip("/") + request.path,
            data=data,
            method=request.method,
            headers={
                "Authorization": self._authorization,
                "Content-Type": "application/json",
                **dict(request.headers),
            },
        )
        try:
            with self._opener.open(outgoing, timeout=self.endpoint.timeout) as reply:
                return transport.Response(reply.status, _decode(reply.read()))
        except urllib.error.HTTPError as error:
            with error:
                return transport.Response(error.code, _decode(error.read()))
        except TimeoutError as error:
            raise transport.RequestTimeoutError(
                f"no answer within {self.endpoint.timeout} s"
            ) from error
        except urllib.error.URLError as error:
            if isinstance(error.reason, TimeoutError):
                raise transport.RequestTimeoutError(
                    f"no answer within {self.endpoint.timeout} s"
                ) from error
            raise transport.UnreachableError(f"{self.endpoint.url}: {error.reason}") from error
        except (OSError, ValueError) as error:  # reset mid-answer, malformed URL
            raise transport.UnreachableError(f"{self.endpoint.url}: {error}") from error


class _NamedHTTPSConnection(http.client.HTTPSConnection):
    """Connects to the URL's host and port, but verifies the certificate for ``server_name``."""

    def __init__(
        self, host: str, *, server_name: str, verify: ssl.SSLContext, **kwargs: Any
    ) -> None:
        super().__init__(host, context=verify, **kwargs)
        self._server_name = server_name
        self._verify = verify

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP only; no proxy tunnel (ProxyHandler({}))
        self.sock = self._verify.wrap_socket(self.sock, server_hostname=self._server_name)


class _NamedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__(context=context)
        self._verify = context
        self._server_name = server_name

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(
            _NamedHTTPSConnection, server_name=self._server_name, verify=self._verify
        )
        return self.do_open(connection, req)


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text
