"""A TCP relay that counts the connections made through it.

Why: the streaming source connects from a Python worker that Spark starts, out of the test's
reach, and whether it retried a connect is only visible on the wire. Pointing the source's URI
at this relay (which passes every byte on to the real broker, TLS included) lets a test count
the attempts: one for a failure that is final, several for one that is retried.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class CountingRelay:
    """Listens on 127.0.0.1 and relays each connection to `(host, port)`; counts them."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._accepted = 0
        self._sockets: list[socket.socket] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="relay-accept", daemon=True)

    @property
    def accepted(self) -> int:
        """How many connections the relay has accepted so far."""
        with self._lock:
            return self._accepted

    def __enter__(self) -> CountingRelay:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        for sock in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
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
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copies `source` to `target` until either side ends, then ends both."""
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
