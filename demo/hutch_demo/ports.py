"""Free loopback ports for the brokers that tests and benchmarks start side by side.

Why: every broker we launch (the reference RabbitMQ node, hutch-broker) must listen on ports nobody
else holds, so that parallel sessions, a system service or a previous crashed run never collide. We
ask the kernel for ports by binding to port 0 on 127.0.0.1, holding all sockets of one request open
until every port is known so that one call never hands out the same port twice.
"""

from __future__ import annotations

import contextlib
import socket

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """Return `count` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOOPBACK, 0))
            ports.append(sock.getsockname()[1])
        return ports


def free_port() -> int:
    """Return one TCP port that was free on 127.0.0.1 a moment ago."""
    return free_ports(1)[0]
