"""Users, password hashes and per-vhost permissions (CN-2, CN-6, API-4).

Password hashes use RabbitMQ's ``rabbit_password_hashing_sha256`` format so
definitions exported from either broker import into the other unchanged:
base64(4-byte salt || SHA-256(salt || password)).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
from dataclasses import dataclass, field
from typing import Final

from hutch_broker.model import patterns

HASHING_ALGORITHM: Final = "rabbit_password_hashing_sha256"


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = os.urandom(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def check_password(password_hash: str, password: str) -> bool:
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    if len(raw) != 36:
        return False
    return hmac.compare_digest(hash_password(password, raw[:4]), password_hash)


def is_loopback(address: str | None) -> bool:
    if not address:
        return False
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


@dataclass(slots=True)
class User:
    name: str
    password_hash: str
    tags: list[str] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)  # max-connections, max-channels

    @property
    def is_administrator(self) -> bool:
        return "administrator" in self.tags


class Permission:
    """configure/write/read regexes, searched unanchored like RabbitMQ (CN-6)."""

    __slots__ = ("_compiled", "configure", "read", "write")

    def __init__(self, configure: str, write: str, read: str) -> None:
        self.configure = configure
        self.write = write
        self.read = read
        self._compiled = {
            "configure": _compile(configure),
            "write": _compile(write),
            "read": _compile(read),
        }

    def allows(self, kind: str, resource: str) -> bool:
        pattern = self._compiled[kind]
        return pattern is not None and pattern.search(resource)


def _compile(pattern: str) -> patterns.Matcher | None:
    """An empty pattern grants nothing, as in RabbitMQ.

    Searched with bounded cost (``patterns``), as policy patterns are: a permission regex
    like ``^(a+)+$`` must not let a resource name freeze the broker.
    """
    if pattern == "":
        return None
    return patterns.compile_pattern(pattern)


def validate_pattern(pattern: str) -> str | None:
    """None when ``pattern`` compiles to a bounded matcher, else the reason."""
    try:
        patterns.compile_pattern(pattern)
    except patterns.PatternError as exc:
        return str(exc)
    return None
