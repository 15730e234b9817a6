"""Readiness probes shared by the broker launchers: do AMQP and the management API answer.

Why: a broker process being alive says nothing about whether clients can use it. RabbitMQ opens its
AMQP listener late in boot and the management listener later still; hutch-broker opens both from one
event loop. A launcher is ready only when both answer, so tests never race the broker's start-up.
The probes use only the standard library, so the testing package has no client dependency.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
from typing import Any

AMQP_PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
_FRAME_METHOD = 1


def amqp_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when the port accepts a connection and answers the protocol header with a frame.

    A server that speaks AMQP 0-9-1 replies with a Connection.Start method frame on channel 0.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(AMQP_PROTOCOL_HEADER)
            first = sock.recv(1)
    except OSError:
        return False
    return first == bytes([_FRAME_METHOD])


def amqps_answers(
    host: str, port: int, context: ssl.SSLContext, server_name: str, timeout: float = 2.0
) -> bool:
    """``amqp_answers`` over TLS: the handshake verified by ``context`` for ``server_name``."""
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=server_name) as sock,
        ):
            sock.sendall(AMQP_PROTOCOL_HEADER)
            first = sock.recv(1)
    except OSError:
        return False
    return first == bytes([_FRAME_METHOD])


def tls_answers(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when the port accepts a connection and completes a TLS handshake (the server's
    certificate is not checked: this asks whether something serves TLS there, not whom)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as sock,
            context.wrap_socket(sock, server_hostname=host),
        ):
            return True
    except OSError:
        return False


def basic_auth(username: str, password: str) -> str:
    token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


def http_get(
    host: str, port: int, path: str, *, username: str, password: str, timeout: float = 2.0
) -> tuple[int, bytes]:
    """GET a management API path with basic auth; return (status, body)."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Authorization": basic_auth(username, password)})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def overview(host: str, port: int, *, username: str, password: str) -> dict[str, Any] | None:
    """The decoded `GET /api/overview`, or None while the management API does not answer 200."""
    try:
        status, body = http_get(host, port, "/api/overview", username=username, password=password)
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None
