"""The stream source's management requests: one kept HTTP connection per reader.

Why kept: a query plans a batch with one `GET` (streambounds.py), and Spark's default trigger
plans again as soon as the last batch is done, so opening a connection per request (as
`urllib.request.urlopen` does) cost a TCP handshake, and with `https` a TLS one, on every
trigger, and left the broker a closed socket per plan. `Session` keeps one HTTP/1.1
connection (keep-alive) and sends every request of its reader on it.

Why one retry: a server may close a kept connection while it is idle (hutch-broker after its
request timeout, 30 s by default; a proxy or a load balancer may sooner), and the client learns
it only when the next request finds the socket closed. That is not an error: a request that
fails so on a kept connection is sent once more on a new one. A failure on a new connection, or
a second one, is an error, with the messages the source always gave (404, 401 or 403, any other
status, an unreachable server). A `GET` has no effect, so sending it twice is safe.

TLS is as it was: the system's trust store, or `caFile`'s CA, and the host name checked. A proxy
is used as `urlopen` used it (`proxy_for`): the environment's `HTTP_PROXY` or `HTTPS_PROXY`
for the management URL's scheme, unless `NO_PROXY` covers its host. Plain http then goes to
the proxy with the full URL in each request line; https through a `CONNECT` tunnel, inside
which TLS is checked against the broker's host name as without a proxy. Credentials in the
proxy's URL are sent to it as Basic `Proxy-Authorization`. Only an `http://` proxy is supported
(as `urlopen` supported it); another scheme is a clear error. A `Session` pickles without its
connection (a socket does not travel to an executor).
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import ssl
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hutch_spark import connections
from hutch_spark.errors import HutchConnectionError
from hutch_spark.options import redact_uri
from hutch_spark.streamoptions import StreamOptions

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0

# How a kept connection that the server closed while idle shows on the next request: the
# request could not be sent, or the server closed without a status line (RemoteDisconnected,
# a ConnectionResetError).
STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


@dataclass(frozen=True)
class Proxy:
    """Where the management requests go instead of the broker, and the header it wants."""

    host: str
    port: int
    headers: dict[str, str]

    def __str__(self) -> str:
        return f"http://{self.host}:{self.port}"


class Session:
    """One kept connection to `settings.management_uri`, opened at the first request."""

    def __init__(self, settings: StreamOptions, env: Mapping[str, str] | None = None) -> None:
        self._settings = settings
        self._connection: http.client.HTTPConnection | None = None
        parts = urllib.parse.urlsplit(settings.management_uri)
        self._secure = parts.scheme == "https"
        self._host, self._port = parts.hostname or "localhost", parts.port
        self._authority = parts.netloc.rpartition("@")[2] or self._host  # no credentials
        self._target = ""  # before each path: the scheme and authority when a proxy forwards
        self._via = ""  # what the errors add about a proxy
        self._proxy_headers: dict[str, str] = {}
        self._prefix = parts.path.rstrip("/")
        self.user, password = credentials(settings, env)
        token = base64.b64encode(f"{self.user}:{password}".encode()).decode()
        self._headers = {"Authorization": f"Basic {token}", "Accept": "application/json"}

    def __getstate__(self) -> dict[str, Any]:
        # Settings only: not the socket, nor a password the environment gave (unpickled, the
        # session reads the environment it is in, as a new one does).
        return {"settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"])  # type: ignore[misc]

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def get(self, path: str, what: str, vhost: str) -> Any:
        """`GET path` (`/api/...`, its query included) decoded from JSON; a clear error for a
        refusal, a status other than 2xx or an unreachable server, naming `what` was asked."""
        where = redact_uri(self._settings.management_uri)
        try:
            status, reason, body = self._exchange(self._prefix + path)
            if 200 <= status < 300:
                return json.loads(body)
        except (OSError, http.client.HTTPException, ValueError) as error:
            raise HutchConnectionError(
                f"hutch: cannot read {what} from the management API at {where}{self._via}: "
                f"{error} (set option 'managementUri' to the broker's management URL)"
            ) from error
        where += self._via
        if status == 404:
            raise HutchConnectionError(
                f"hutch: {what} does not exist in vhost {vhost!r} (management API at {where})"
            )
        if status in (401, 403):
            raise HutchConnectionError(
                f"hutch: the management API at {where} refused user {self.user!r} ({status}): "
                "reading stream bounds needs a user with a management tag (monitoring, or "
                f"management with access to vhost {vhost!r})"
            )
        raise HutchConnectionError(
            f"hutch: the management API at {where} answered {status} {reason} for {what}"
        )

    def _exchange(self, target: str) -> tuple[int, str, bytes]:
        """One request and its whole answer (read to the end, so the connection can be kept);
        sent again on a new connection if the kept one turns out closed."""
        kept = self._connection is not None and self._connection.sock is not None
        try:
            return self._send(target)
        except STALE as error:
            self.close()
            if not kept:
                raise
            log.debug("hutch: the management API closed the kept connection (%s): reopening", error)
        except BaseException:
            self.close()
            raise
        try:
            return self._send(target)
        except BaseException:
            self.close()
            raise

    def _send(self, target: str) -> tuple[int, str, bytes]:
        connection = self._connection
        if connection is None:
            connection = self._connection = self._open()
        connection.request(
            "GET", self._target + target, headers={**self._headers, **self._proxy_headers}
        )
        reply = connection.getresponse()
        body = reply.read()
        return reply.status, reply.reason, body

    def _open(self) -> http.client.HTTPConnection:
        proxy = proxy_for("https" if self._secure else "http", self._authority)
        self._via = "" if proxy is None else f" through the proxy {proxy}"
        self._target, self._proxy_headers = "", {}
        if not self._secure:
            if proxy is None:
                return http.client.HTTPConnection(self._host, self._port, timeout=TIMEOUT_S)
            self._target, self._proxy_headers = f"http://{self._authority}", proxy.headers
            return http.client.HTTPConnection(proxy.host, proxy.port, timeout=TIMEOUT_S)
        context = ssl.create_default_context(cafile=self._settings.ca_file)
        if proxy is None:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=TIMEOUT_S, context=context
            )
        tunnel = http.client.HTTPSConnection(
            proxy.host, proxy.port, timeout=TIMEOUT_S, context=context
        )
        tunnel.set_tunnel(self._host, self._port, headers=proxy.headers)
        return tunnel


def proxy_for(scheme: str, authority: str) -> Proxy | None:
    """The proxy `urlopen` would use for `scheme://authority`: the environment's for that
    scheme (`urllib.request.getproxies`), unless `NO_PROXY` covers the host
    (`urllib.request.proxy_bypass`); None for a direct connection."""
    url = urllib.request.getproxies().get(scheme)
    if not url or urllib.request.proxy_bypass(authority):
        return None
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port or 80
    except ValueError as error:
        raise HutchConnectionError(
            f"hutch: the environment's {scheme} proxy {redact_uri(url)!r} has no valid port: "
            f"{error}"
        ) from None
    if parts.scheme != "http" or not parts.hostname:
        raise HutchConnectionError(
            f"hutch: the environment's {scheme} proxy {redact_uri(url)!r} is not an http:// "
            f"proxy (set in {scheme.upper()}_PROXY; NO_PROXY may exempt the management host)"
        )
    headers = {}
    if parts.username is not None:
        login = (
            f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        )
        token = base64.b64encode(login.encode()).decode()
        headers["Proxy-Authorization"] = f"Basic {token}"
    return Proxy(parts.hostname, port, headers)


def credentials(settings: StreamOptions, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The management user: managementUri's, the AMQP URI's, the environment's, or guest."""
    environment = os.environ if env is None else env
    for uri in (settings.management_uri, settings.uri):
        parts = urllib.parse.urlsplit(uri)
        if parts.username is not None:
            return (
                urllib.parse.unquote(parts.username),
                urllib.parse.unquote(parts.password or ""),
            )
    if connections.USERNAME_ENV in environment:
        return (
            environment[connections.USERNAME_ENV],
            environment.get(connections.PASSWORD_ENV, ""),
        )
    return ("guest", "guest")
