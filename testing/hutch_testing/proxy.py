"""A forward HTTP proxy on loopback that records what clients ask it, for tests of a client
that must honour `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY` as urllib does.

Why a real one: whether a client used a proxy, and how (a request in absolute form, a CONNECT
tunnel, the proxy's credentials), is only visible to the proxy. This one forwards a plain-http
request in absolute form to its host in origin form and relays the answer (keep-alive on the
client's side), and for `CONNECT host:port` relays bytes both ways, TLS included, unread. Each
request line is recorded with the `Proxy-Authorization` it came with.
"""

from __future__ import annotations

import http.client
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hutch_testing import relay

# Headers not passed on: those for one hop only (RFC 9110 7.6.1), and the length, which the
# proxy sets itself (it relays whole bodies, never chunked).
NOT_PASSED_ON = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    )
)


class RecordingProxy(ThreadingHTTPServer):
    """Listens on 127.0.0.1; `asked` holds (request line, Proxy-Authorization or None)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.asked: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, name="proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, line: str, authorization: str | None) -> None:
        with self._lock:
            self.asked.append((line, authorization))

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(5)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecordingProxy

    def do_GET(self) -> None:
        self.server.record(self.requestline, self.headers.get("Proxy-Authorization"))
        target = urllib.parse.urlsplit(self.path)
        if target.scheme != "http" or not target.hostname:
            self.send_error(400, "absolute-form http:// targets only")
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in NOT_PASSED_ON}
        upstream = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=30)
        try:
            upstream.request(
                "GET", target.path + (f"?{target.query}" if target.query else ""), headers=headers
            )
            reply = upstream.getresponse()
            body = reply.read()
        finally:
            upstream.close()
        self.send_response(reply.status, reply.reason)
        for key, value in reply.getheaders():
            if key.lower() not in NOT_PASSED_ON:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_CONNECT(self) -> None:
        self.server.record(self.requestline, self.headers.get("Proxy-Authorization"))
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        except (OSError, ValueError):
            self.send_error(502, "cannot reach the tunnel's target")
            return
        upstream.settimeout(None)
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        relay.pump_both_ways(self.connection, upstream)
        upstream.close()  # the client's socket is the HTTP server's to close

    def log_message(self, *_: Any) -> None:
        pass
