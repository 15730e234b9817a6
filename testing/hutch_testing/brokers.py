"""hutch-broker as a child process, for tests that need a real server and for bench/.

Why: protocol, persistence and crash tests must exercise the broker the way production runs it, as
`python -m hutch_broker` in its own process, with a data directory that survives `restart()` and a
`kill()` that behaves like a crash. Its surface is the same as `rabbitmq.RabbitMQ`, so a test or a
benchmark can run the same steps against both.

The broker is started as
`python -m hutch_broker --amqp-port A --http-port H --data-dir D --bind 127.0.0.1`, logs one line
per listener at start-up, and serves `GET /api/overview` with basic auth guest/guest.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import ClassVar, Self, Unpack

from hutch_demo import processes

# broker/ of this source tree: lets the child import hutch_broker when the repo is not installed.
_SOURCE_BROKER_DIR = Path(__file__).resolve().parents[2] / "broker"


class HutchLaunchOptions(processes.LaunchOptions, total=False):
    """``HutchBroker``'s keyword arguments but ``work_dir``: what ``hutch_broker_factory`` takes."""

    data_dir: Path | None
    extra_args: list[str] | None
    python: str


class HutchBrokerOptions(HutchLaunchOptions, total=False):
    """All of ``HutchBroker``'s keyword arguments."""

    work_dir: Path | None


class HutchBroker(processes.BrokerProcess):
    """A hutch-broker on 127.0.0.1 with free ports and its own data directory."""

    kind = "hutch"
    #: Every launch of a hutch-broker process in this interpreter, TLS brokers too: "start" for a
    #: broker's first, "restart" for a later one. A plain count, so it costs nothing;
    #: ``hutch_testing.brokerstarts`` reads it around each test to count starts per module.
    launches: ClassVar[Counter[str]] = Counter()

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        extra_args: list[str] | None = None,
        python: str = sys.executable,
        **kwargs: Unpack[processes.ProcessOptions],
    ) -> None:
        kwargs.setdefault("start_timeout", 20.0)  # HutchBroker's default; BrokerProcess's is 60 s
        super().__init__(**kwargs)
        self.data_dir = data_dir or self.work_dir / "data"
        self.extra_args = list(extra_args or [])
        self.python = python
        self._launched = False

    def start(self) -> Self:
        if not self.running:
            HutchBroker.launches["restart" if self._launched else "start"] += 1
            self._launched = True
        return super().start()

    def _command(self) -> list[str]:
        return [
            self.python,
            "-m",
            "hutch_broker",
            "--amqp-port",
            str(self.amqp_port),
            "--http-port",
            str(self.http_port),
            "--data-dir",
            str(self.data_dir),
            "--bind",
            self.host,
            *self.extra_args,
        ]

    def _prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"  # start-up lines reach console.log at once
        if _SOURCE_BROKER_DIR.is_dir():
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [str(_SOURCE_BROKER_DIR), env.get("PYTHONPATH")])
            )
        return env
