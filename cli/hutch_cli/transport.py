"""The vocabulary between plans and the HTTP client: a response and the two ways a request fails.

Why apart from ``client``: ``execution`` reads answers and failures without importing the module
that does network I/O, so it runs in tests with a fake ``send``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Response:
    status: int
    body: Any  # decoded JSON; the text when it is not JSON; None when empty


class UnreachableError(Exception):
    """No HTTP answer: refused, no route, bad TLS certificate, DNS failure."""


class RequestTimeoutError(Exception):
    """The broker accepted the connection but did not answer in time."""
