"""Free loopback ports for the brokers that tests and benchmarks start side by side.

Why: every broker we launch (the reference RabbitMQ node, hutch-broker) must listen on ports nobody
else holds, so that parallel sessions, a system service or a previous crashed run never collide. We
ask the kernel for ports by binding to port 0 on 127.0.0.1, holding all sockets of one request open
until every port is known so that one call never hands out the same port twice.

A port is free only until its broker binds it, a second or two later. Two processes that pick in
that window can get the same port (the kernel picks at random among the free ones), and the
slower broker then fails to bind, or its readiness probe finds the other one's broker. The test
suite's parallel workers (scripts/test.sh) therefore each keep to a shard of the ports:
``HUTCH_PORT_SHARD=k/n`` (``hutch_testing.pytest_plugin`` sets it on worker k of n) returns only
ports whose ``(port >> 1) % n`` is k. The low bit is left out because Linux prefers odd ports for
``bind`` to port 0 and even ones for ``connect``.

Within one process, a port handed out is not handed out again while it is among the last
``RECENT`` ones: a launcher that asks twice before its broker binds (a broker's two ports,
then a TLS broker's two more, then RabbitMQ's distribution port) would otherwise get the same
port twice now and then, since the first call's sockets are closed by then. A CI run saw it:
RabbitMQ refused to start with its HTTPS port equal to its HTTP port ("incompatible_listeners").
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import threading

LOOPBACK = "127.0.0.1"
SHARD_ENV = "HUTCH_PORT_SHARD"
_MAX_TRIES = 1000  # a shard of n holds 1/n of the ports: n * count tries on average
RECENT = 256  # ports this process handed out last, not handed out again (module docstring)
_recent: collections.deque[int] = collections.deque(maxlen=RECENT)
_recent_lock = threading.Lock()


def shard(value: str | None) -> tuple[int, int]:
    """``(k, n)`` from ``"k/n"`` (no value: ``(0, 1)``, every port); a bad value raises."""
    if not value:
        return 0, 1
    index, _, count = value.partition("/")
    try:
        k, n = int(index), int(count)
    except ValueError:
        k, n = -1, 0
    if not 0 <= k < n:
        raise ValueError(f"{SHARD_ENV}={value!r}: expected k/n with 0 <= k < n, e.g. 1/2")
    return k, n


def in_shard(port: int, k: int, n: int) -> bool:
    return (port >> 1) % n == k


def free_ports(count: int) -> list[int]:
    """Return `count` distinct TCP ports that were free on 127.0.0.1 a moment ago (in this
    process's shard, ``HUTCH_PORT_SHARD``)."""
    k, n = shard(os.environ.get(SHARD_ENV))
    with _recent_lock, contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(_MAX_TRIES):
            if len(ports) == count:
                break
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOOPBACK, 0))  # held until the end: never handed out twice
            port = sock.getsockname()[1]
            if in_shard(port, k, n) and port not in _recent:
                ports.append(port)
        if len(ports) != count:
            raise OSError(f"no {count} free ports in shard {k}/{n} after {_MAX_TRIES} tries")
        _recent.extend(ports)
        return ports


def free_port() -> int:
    """Return one TCP port that was free on 127.0.0.1 a moment ago."""
    return free_ports(1)[0]


def even_pair(taken: set[int] | frozenset[int] = frozenset()) -> int:
    """An even port p with p and p + 1 both free a moment ago and outside ``taken``: for a
    hutch-broker with ``--vhost-workers 2``, whose worker i's management API listens on
    http-port + i. p + 1 stays in p's shard (``port >> 1``) only when p is even: an odd http
    port handed its worker 1 a port of another pytest worker's shard, which one of its brokers
    could hold (a fresh-clone CI run: worker 1's API never answered)."""
    for _ in range(200):
        port = free_port() & ~1
        if {port, port + 1} & taken:
            continue
        try:
            with socket.socket() as first, socket.socket() as second:
                first.bind((LOOPBACK, port))
                second.bind((LOOPBACK, port + 1))
        except OSError:
            continue
        return port
    raise OSError("no two adjacent free ports found")
