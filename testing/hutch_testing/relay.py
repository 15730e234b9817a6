"""A TCP relay that counts the connections made through it, and the HTTP requests.

Why: the streaming source connects from a Python worker that Spark starts, out of the test's
reach, and whether it retried a connect is only visible on the wire. Pointing the source's URI
at this relay (which passes every byte on to the real broker, TLS included) lets a test count
the attempts: one for a failure that is final, several for one that is retried.

The management client keeps its HTTP connection for many requests, so a count of connections is
no count of requests: `requests` counts the request lines of plain HTTP sent through the relay
(under TLS it sees none). `drop()` closes the connections relayed so far, as a server closes an
idle kept connection. The relaying itself, `pump_both_ways`, is also the CONNECT tunnel of
`hutch_testing.proxy`.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Callable

REQUEST_LINE = re.compile(rb"[A-Z]+ \S+ HTTP/1\.[01]\r\n")


class CountingRelay:
    """Listens on 127.0.0.1 and relays each connection to `(host, port)`; counts them."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._accepted = 0
        self._requests = 0
        self._sockets: list[socket.socket] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="relay-accept", daemon=True)

    @property
    def accepted(self) -> int:
        """How many connections the relay has accepted so far."""
        with self._lock:
            return self._accepted

    @property
    def requests(self) -> int:
        """How many HTTP request lines clients have sent through the relay so far."""
        with self._lock:
            return self._requests

    def drop(self) -> None:
        """Closes every connection relayed so far, both ends; new ones are relayed as before."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        _close(sockets)

    def __enter__(self) -> CountingRelay:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        _close([self._listener, *sockets])
        self._thread.join(5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self._upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._accepted += 1
                self._sockets += [client, upstream]
            threading.Thread(
                target=pump_both_ways,
                args=(client, upstream),
                kwargs={"sent": self._request_counter()},
                name="relay-pump",
                daemon=True,
            ).start()

    def _request_counter(self) -> Callable[[bytes], None]:
        """What counts the request lines in one client's bytes, one cut across two reads too."""
        tail = b""

        def count(chunk: bytes) -> None:
            nonlocal tail
            seen = tail + chunk
            found = sum(1 for line in REQUEST_LINE.finditer(seen) if line.end() > len(tail))
            tail = seen[-16384:]  # longer than any request line a server takes
            with self._lock:
                self._requests += found

        return count


def pump_both_ways(
    client: socket.socket,
    server: socket.socket,
    *,
    sent: Callable[[bytes], None] | None = None,
) -> None:
    """Copies bytes both ways between `client` and `server` until either side ends, then shuts
    both down; returns once both directions have stopped. `sent` sees what the client sends.

    Why one function: the counting relay and the recording proxy's CONNECT tunnel are the same
    thing on the wire, and a pair of sockets must end together (a client that hangs up ends the
    server's side, and the other way), which is easy to get half right twice. Closing stays
    with the caller, who owns the sockets (the relay keeps its own for `drop()`).
    """
    back = threading.Thread(target=_pump, args=(server, client), name="pump-back", daemon=True)
    back.start()
    _pump(client, server, sent)
    back.join(5)  # _pump shuts both sockets down as it ends: that ends the other one too


def _close(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def _pump(
    source: socket.socket,
    target: socket.socket,
    seen: Callable[[bytes], None] | None = None,
) -> None:
    """Copies `source` to `target` until either side ends, then ends both."""
    try:
        while chunk := source.recv(65536):
            if seen is not None:
                seen(chunk)
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
