"""A client that opens new AMQPS connections without pause and records each served certificate.

Why: "a renewed certificate is no outage" is proven by a client connecting all through the
renewal: every connect must succeed (a full TLS handshake, verified against the test's CA, and
the broker's Connection.Start), and the certificate serial it was served must move from the old
certificate to the new one, never back. The broker-level test (a Secret volume swapped by hand)
and the node test (a real kubelet refreshing a Secret volume) use the same loop.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Self

from cryptography import x509
from hutch_demo import probes
from hutch_demo.certs import Leaf


def serial_of_leaf(leaf: Leaf) -> int:
    return x509.load_pem_x509_certificate(leaf.cert_pem).serial_number


def served_serial(host: str, port: int, context: ssl.SSLContext, server_name: str) -> int:
    """One new connection: handshake, AMQP header, Connection.Start's first byte; the serial."""
    with (
        socket.create_connection((host, port), timeout=5.0) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as sock,
    ):
        sock.sendall(probes.AMQP_PROTOCOL_HEADER)
        if sock.recv(1) != b"\x01":
            raise ConnectionError("no Connection.Start after the TLS handshake")
        der = sock.getpeercert(binary_form=True)
    if der is None:
        raise ConnectionError("no server certificate")
    return x509.load_der_x509_certificate(der).serial_number


class ConnectLoop:
    """Connects in a thread, ``pause`` seconds apart; records (monotonic time, serial) and every
    failure's repr. A context manager: the loop runs inside the ``with``."""

    def __init__(
        self,
        host: str,
        port: int,
        context: ssl.SSLContext,
        *,
        server_name: str = "localhost",
        pause: float = 0.0,
    ) -> None:
        self.host, self.port, self.context = host, port, context
        self.server_name = server_name
        self.pause = pause
        self.serials: list[tuple[float, int]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tls-connect-loop", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                serial = served_serial(self.host, self.port, self.context, self.server_name)
            except (OSError, ConnectionError) as exc:
                self.failures.append(repr(exc))
            else:
                self.serials.append((time.monotonic(), serial))
            if self.pause:
                self._stop.wait(self.pause)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def wait_for(self, serial: int, timeout: float, *, since: float | None = None) -> float:
        """Seconds from ``since`` (default: now) until a connection made after it got
        ``serial``; AssertionError after ``timeout``."""
        start = time.monotonic() if since is None else since
        while time.monotonic() - start < timeout:
            for moment, seen in self.serials:
                if moment >= start and seen == serial:
                    return moment - start
            time.sleep(0.05)
        raise AssertionError(
            f"serial {serial} not served within {timeout:.0f} s; "
            f"{len(self.serials)} connects, failures: {self.failures[-3:]}"
        )

    def distinct_in_order(self) -> list[int]:
        """The serials served, each run of equal ones once: [old, new] for one clean swap."""
        runs: list[int] = []
        for _, serial in self.serials:
            if not runs or runs[-1] != serial:
                runs.append(serial)
        return runs
