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

Ports are picked outside the kernel's ephemeral range (``ip_local_port_range``), by binding a
random candidate of this process's shard. Inside it, any process's ``bind`` to port 0 or
``connect`` may take the port in the window before its broker binds, whatever the shards:
another worker's own ``free_ports`` held the sockets it drew outside its shard until it was
done, and every client, JVM and test server on the machine draws there (a CI run: a broker
failed with "address already in use" on a port handed out a moment before). Outside it only an
explicit ``bind`` can. The range read is the machine's own; when it leaves nothing to pick
from, the kernel picks as before (``bind`` to port 0).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import random
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"
SHARD_ENV = "HUTCH_PORT_SHARD"
_MAX_TRIES = 1000  # a shard of n holds 1/n of the ports: n * count tries on average
RECENT = 256  # ports this process handed out last, not handed out again (module docstring)
_recent: collections.deque[int] = collections.deque(maxlen=RECENT)
_recent_lock = threading.Lock()
_rng = random.Random()  # its own, so a test that seeds ``random`` does not fix the ports
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10300  # below: well-known services, Kubernetes' components (10248-10259), etcd
#: Never handed out though outside the ephemeral range: Kubernetes NodePorts (its default
#: range) and the ports a RabbitMQ installed as a service listens on.
AVOID = (range(30000, 32768), range(15670, 15693), range(25672, 25673))


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


def ephemeral_range(text: str) -> range:
    """The ports the kernel picks from for ``bind`` to 0 and ``connect``, from the text of
    ``ip_local_port_range`` ("32768\t60999")."""
    low, high = (int(field) for field in text.split())
    return range(low, high + 1)


def pickable(ephemeral: range) -> list[range]:
    """The ranges ``free_ports`` draws from: ``LOWEST`` to 65535 but the ephemeral range and
    ``AVOID`` (pure)."""
    edges = sorted([ephemeral, *AVOID], key=lambda taken: taken.start)
    ranges, start = [], LOWEST
    for taken in edges:
        if taken.start > start:
            ranges.append(range(start, min(taken.start, 65536)))
        start = max(start, taken.stop)
    if start < 65536:
        ranges.append(range(start, 65536))
    return [span for span in ranges if span]


@functools.cache
def _pickable_here() -> tuple[range, ...]:
    """This machine's ``pickable`` ranges, read once per process (a sysctl set at boot)."""
    try:
        return tuple(pickable(ephemeral_range(EPHEMERAL.read_text())))
    except (OSError, ValueError):
        return ()


def candidates(ranges: Sequence[range], k: int, n: int, rng: random.Random) -> Iterator[int]:
    """Ports of shard ``k`` of ``n`` drawn at random from ``ranges`` (weighted by size), for
    ever; none at all when ``ranges`` is empty."""
    total = sum(map(len, ranges))
    while total:
        index = rng.randrange(total)
        for span in ranges:
            if index < len(span):
                port = span[index]
                break
            index -= len(span)
        if in_shard(port, k, n):
            yield port


def _bind(sock: socket.socket, port: int) -> int | None:
    """``sock`` bound to ``port`` on loopback (0: the kernel's pick): the port, or None if it
    is taken."""
    try:
        sock.bind((LOOPBACK, port))
    except OSError:
        if port == 0:
            raise
        return None
    return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """Return `count` distinct TCP ports that were free on 127.0.0.1 a moment ago (in this
    process's shard, ``HUTCH_PORT_SHARD``; outside the ephemeral range where it can)."""
    k, n = shard(os.environ.get(SHARD_ENV))
    drawn = candidates(_pickable_here(), k, n, _rng)
    with _recent_lock, contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(_MAX_TRIES):
            if len(ports) == count:
                break
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            # Held until the end: never handed out twice.
            port = _bind(sock, next(drawn, 0))
            if port is not None and in_shard(port, k, n) and port not in _recent:
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
