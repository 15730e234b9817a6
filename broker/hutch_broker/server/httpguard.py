"""Bounds on the management listener: how many HTTP connections, for how long, in how many fds.

Why: aiohttp's server has no cap on connections and, unless told, waits an hour for a request
line. 1,100 sockets that never finished one used every file descriptor of a 1,024 limit, and
then new AMQP connections were reset without a word. So the management listener here:

- raises the soft ``RLIMIT_NOFILE`` to the hard limit at start, when allowed, and sizes the HTTP
  cap from the result (a quarter of it, at most ``DEFAULT_MAX_CONNECTIONS``), so most file
  descriptors stay for AMQP clients and the store whatever HTTP clients do;
- counts open HTTP connections in a thin protocol wrapper (``GuardedSite``): one over the cap
  gets a 503 in RabbitMQ's JSON error shape and is closed at once;
- gives each connection ``request_timeout_s`` from its start, or from the end of its last
  response, to complete a request's headers (aiohttp's keep-alive timer does exactly this when
  set: it closes a connection still waiting for a whole request), which closes slow request
  lines and idle keep-alive connections alike; TLS handshakes get the same time;
- logs each kind of refusal (over the cap, a malformed or oversized request line or header)
  as one line, at most once a minute per reason with a count of the ones left out, instead of
  aiohttp's traceback at ERROR for each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from collections.abc import Callable
from typing import Final, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger(__name__)
# aiohttp's per-connection logger: its parse errors are rewritten by ``OneLineParseErrors``.
SERVER_LOG: Final = logging.getLogger("hutch_broker.server.httpguard.aiohttp")

DEFAULT_MAX_CONNECTIONS: Final = 1000
DEFAULT_REQUEST_TIMEOUT_S: Final = 30.0
LOG_EVERY_S: Final = 60.0
_OVER_CAP_BODY: Final = json.dumps(
    {"error": "service_unavailable", "reason": "too many management connections"}
).encode()
OVER_CAP_RESPONSE: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: " + str(len(_OVER_CAP_BODY)).encode() + b"\r\n\r\n"
) + _OVER_CAP_BODY


def raise_fd_limit() -> int:
    """Raise the soft file-descriptor limit to the hard one if allowed; the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the file descriptor limit to %d: %s", hard, exc)
        else:
            soft = hard
    return soft


def connection_cap(configured: int | None, fd_limit: int) -> int:
    """The configured cap, or a quarter of the fd limit (at most 1,000, at least 16)."""
    if configured is not None:
        return configured
    return max(16, min(DEFAULT_MAX_CONNECTIONS, fd_limit // 4))


class RateLimitedLog:
    """One line per reason, then at most one per ``every_s`` saying how many were left out."""

    def __init__(
        self, *, every_s: float = LOG_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every_s = every_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def allow(self, reason: str) -> int | None:
        """``None``: say nothing now; else log, mentioning this many left out since last time."""
        now = self.clock()
        last = self._last.get(reason)
        if last is not None and now - last < self.every_s:
            self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
            return None
        self._last[reason] = now
        return self._suppressed.pop(reason, 0)


class OneLineParseErrors(logging.Filter):
    """aiohttp logs a request it could not parse (a request line or header over the limit,
    garbage) with a traceback at ERROR; that is a client's mistake, not the broker's."""

    def __init__(self, limiter: RateLimitedLog) -> None:
        super().__init__()
        self.limiter = limiter

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        reason = type(exc).__name__
        left_out = self.limiter.allow(f"parse:{reason}")
        if left_out is None:
            return False
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = "refused an HTTP request from %s (400, %s: %s)%s"
        record.args = (peer, reason, exc.message, _left_out(left_out))
        record.exc_info, record.exc_text = None, None
        return True


def _left_out(count: int) -> str:
    return f"; {count} more like it not logged" if count else ""


class ConnectionGuard:
    """The open HTTP connections of every management listener, against one cap."""

    def __init__(self, cap: int, limiter: RateLimitedLog) -> None:
        self.cap = cap
        self.open = 0
        self.refused = 0
        self.limiter = limiter

    def admit(self, peer: object) -> bool:
        if self.open < self.cap:
            self.open += 1
            return True
        self.refused += 1
        left_out = self.limiter.allow("cap")
        if left_out is not None:
            log.warning(
                "refused an HTTP connection from %s: %d management connections open (the cap)%s",
                peer,
                self.open,
                _left_out(left_out),
            )
        return False

    def release(self) -> None:
        self.open -= 1


class _Guarded(asyncio.Protocol):
    """aiohttp's request handler behind the cap: every event is passed through unchanged."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._guard.admit(transport.get_extra_info("peername")):
            stream = cast(asyncio.Transport, transport)  # uvloop's are not asyncio subclasses
            stream.write(OVER_CAP_RESPONSE)
            stream.close()
            return
        self._admitted = True
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted:
            self._admitted = False
            self._guard.release()
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._admitted:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._admitted else None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class GuardedSite(web.BaseSite):
    """``web.TCPSite`` with every connection counted by ``guard`` and TLS handshakes timed."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        guard: ConnectionGuard,
        handshake_timeout_s: float,
        ssl_context: object = None,
        backlog: int = 1024,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)  # type: ignore[arg-type]
        self.host = host
        self.port = port
        self.guard = guard
        self.handshake_timeout_s = handshake_timeout_s

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None  # noqa: S101 - runner.setup() ran (BaseSite checks)

        def factory() -> asyncio.Protocol:
            return _Guarded(server(), self.guard)

        self._server = await asyncio.get_running_loop().create_server(
            factory,
            self.host,
            self.port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            ssl_handshake_timeout=self.handshake_timeout_s if self._ssl_context else None,
        )
