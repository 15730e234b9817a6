"""Hostile HTTP clients against a real hutch-broker: slow request lines, too many connections.

The original case: 1,100 sockets that never finished a request line, under a 1,024 fd limit,
stayed open for good and used every file descriptor, so new AMQP connections were reset. Here
the same at a small scale (a 256 fd limit, 300 slow sockets, a 3 s request timeout so the test
is quick): AMQP still connects, the broker's fds stay bounded, the sockets over the cap get a
503 at once, the others are closed by the timeout, each refusal is logged once, and the
management API answers again afterwards.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pika
import pytest
from hutch_broker.server import httpguard

FD_LIMIT = 256
SLOW_SOCKETS = 300
PARTIAL_REQUEST = b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\nX-Slow: "
REQUEST_TIMEOUT_S = 3.0


def limited_python(tmp_path: Path) -> str:
    """A python that starts with RLIMIT_NOFILE soft = hard = FD_LIMIT (nothing to raise to)."""
    wrapper = tmp_path / "python-ulimited"
    wrapper.write_text(f'#!/bin/sh\nulimit -n {FD_LIMIT}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_closed(sockets: list[socket.socket], seconds: float) -> list[socket.socket]:
    """The sockets the broker closed within ``seconds`` (what it sent before is discarded)."""
    open_ = set(sockets)
    deadline = time.monotonic() + seconds
    while open_ and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select(list(open_), [], [], left)
        for sock in ready:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                open_.discard(sock)
    return [sock for sock in sockets if sock not in open_]


def overview_status(broker) -> int:
    request = urllib.request.Request(f"{broker.http_url}/api/overview")  # noqa: S310
    credentials = "Basic Z3Vlc3Q6Z3Vlc3Q="  # guest:guest
    request.add_header("Authorization", credentials)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.timeout(90)
def test_slow_request_lines_neither_starve_amqp_nor_stay_open(hutch_broker_factory, tmp_path):
    config = tmp_path / "hutch.conf"
    config.write_text(f"management.tcp.request_timeout = {int(REQUEST_TIMEOUT_S * 1000)}\n")
    broker = hutch_broker_factory(
        python=limited_python(tmp_path), extra_args=["--config", str(config)]
    )
    cap = httpguard.connection_cap(None, FD_LIMIT)
    baseline_fds = open_fds(broker.pid)
    slow = []
    try:
        for _ in range(SLOW_SOCKETS):
            sock = socket.create_connection(("127.0.0.1", broker.http_port), timeout=5)
            sock.sendall(PARTIAL_REQUEST)
            slow.append(sock)
        opened_at = time.monotonic()

        # Over the cap: a 503 and closed at once (the client may see a reset instead, when its
        # unread partial request is discarded). Under the cap: open until the request timeout.
        refused = wait_closed(slow, 1.5)
        assert SLOW_SOCKETS - cap - 4 <= len(refused) <= SLOW_SOCKETS - cap
        assert open_fds(broker.pid) <= baseline_fds + cap + 8

        params = pika.ConnectionParameters(
            "127.0.0.1", broker.amqp_port, socket_timeout=5, blocked_connection_timeout=5
        )
        amqp = pika.BlockingConnection(params)
        amqp.channel().queue_declare("still-connects")
        amqp.close()

        admitted = [sock for sock in slow if sock not in refused]
        assert wait_closed(admitted, opened_at + REQUEST_TIMEOUT_S + 5 - time.monotonic()) == (
            admitted
        ), "a slow socket was still open after the request timeout"
        assert time.monotonic() - opened_at >= REQUEST_TIMEOUT_S - 0.5  # and not closed early
    finally:
        for sock in slow:
            sock.close()

    assert overview_status(broker) == 200
    log = broker.console_log.read_text()
    assert log.count("refused an HTTP connection") == 1
    assert "Traceback" not in log


def status_of(broker, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=5) as sock:
        sock.sendall(request)
        return sock.recv(65536).split(b"\r\n", 1)[0]


@pytest.mark.timeout(60)
def test_oversized_request_lines_and_headers_are_a_400_and_one_log_line(hutch_broker):
    long_line = b"GET /api/overview?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    long_header = b"GET /api/overview HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n"
    for _ in range(20):
        assert status_of(hutch_broker, long_line).split(b" ")[1] == b"400"
        assert status_of(hutch_broker, long_header).split(b" ")[1] == b"400"
    assert overview_status(hutch_broker) == 200

    log = hutch_broker.console_log.read_text()
    refusals = [line for line in log.splitlines() if "refused an HTTP request" in line]
    assert 1 <= len(refusals) <= 2, refusals  # one line per kind of error, not one per request
    assert all("WARNING" in line for line in refusals)
    assert "Traceback" not in log
    assert "ERROR" not in log
