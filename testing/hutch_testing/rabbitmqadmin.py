"""The real rabbitmqadmin CLI, as the reference RabbitMQ 3.10.8 node serves it.

Why: rabbitmqadmin is what operators type against a broker, and it reads the management API
with its own assumptions (column names, nested keys flattened as ``queue.name``, the publish
and get bodies). Running the script itself against hutch-broker and RabbitMQ 3.10.8 checks
those assumptions, not our reading of them. The script is fetched once from the reference's
``/cli/rabbitmqadmin`` and cached under ``~/.cache/hutch/``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from hutch_demo import management, probes

CACHE = Path.home() / ".cache" / "hutch" / "rabbitmqadmin-3.10.8"


def fetch(reference: management.HttpReachable) -> Path:
    """The cached script, fetched from ``reference`` (a running RabbitMQ) the first time."""
    if not CACHE.exists():
        request = urllib.request.Request(  # noqa: S310 - loopback URL of the reference node
            reference.http_url + "/cli/rabbitmqadmin",
            headers={"Authorization": probes.basic_auth(*reference.credentials)},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
            script = reply.read()
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        partial = CACHE.with_suffix(".partial")
        partial.write_bytes(script)
        partial.replace(CACHE)  # never leave a half-written script in the cache
    return CACHE


class AdminTarget(Protocol):
    """What ``rabbitmqadmin`` is pointed at: a management API's host, port and credentials."""

    @property
    def host(self) -> str: ...

    @property
    def http_port(self) -> int: ...

    @property
    def credentials(self) -> tuple[str, str]: ...


class Admin:
    """``rabbitmqadmin`` pointed at one broker (host, port and credentials given)."""

    def __init__(self, script: Path, broker: AdminTarget) -> None:
        username, password = broker.credentials
        self.command = [
            sys.executable,
            str(script),
            f"--host={broker.host}",
            f"--port={broker.http_port}",
            f"--username={username}",
            f"--password={password}",
        ]

    def run(self, *args: str, fmt: str = "table") -> str:
        """The command's standard output; a non-zero exit fails with its standard error."""
        done = subprocess.run(  # noqa: S603 - our interpreter and the cached script
            [*self.command, f"--format={fmt}", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"rabbitmqadmin {' '.join(args)}: {done.stderr or done.stdout}")
        return done.stdout

    def json(self, *args: str) -> Any:
        """A list or show command's items, as ``--format=raw_json`` prints them."""
        return json.loads(self.run(*args, fmt="raw_json"))

    def tsv(self, *args: str) -> list[list[str]]:
        """A list or show command's rows, header first, as ``--format=tsv`` prints them."""
        return [line.split("\t") for line in self.run(*args, fmt="tsv").splitlines()]
