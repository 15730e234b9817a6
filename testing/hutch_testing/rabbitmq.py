"""A private RabbitMQ 3.10.8 node, the reference that hutch-broker is compared with side by side.

Why: the behaviour contract (docs/contracts/broker.md) quotes what was observed on the
Debian bookworm rabbitmq-server 3.10.8, and tests assert it on both brokers. We never use the
package's system service: each session starts its own node as a child process with a unique node
name, free loopback ports (AMQP, management HTTP, Erlang distribution), its own HOME (and so its own
Erlang cookie), mnesia, log, config and enabled_plugins files under a temp dir. Nothing leaks to or
from /etc/rabbitmq or /var/lib/rabbitmq, and `stop()` removes it all. epmd, shared by every Erlang
node of the machine, is told to listen on loopback only and is left running.

Install the package with scripts/install-rabbitmq.sh.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Unpack

from hutch_demo import ports, processes

RABBITMQ_HOME = Path("/usr/lib/rabbitmq")
SERVER_SCRIPT = RABBITMQ_HOME / "bin" / "rabbitmq-server"
CTL_SCRIPT = RABBITMQ_HOME / "bin" / "rabbitmqctl"
EXPECTED_VERSION = "3.10.8"


class RabbitMQNotInstalledError(processes.BrokerStartError):
    """rabbitmq-server is not installed; run scripts/install-rabbitmq.sh."""


class RabbitMQ(processes.BrokerProcess):
    """A RabbitMQ node on 127.0.0.1 with the management plugin, started as a child process."""

    kind = "rabbitmq"
    graceful_stop = False  # a clean shutdown costs ~5 s and its data is deleted right after

    def __init__(self, **kwargs: Unpack[processes.ProcessOptions]) -> None:
        super().__init__(**kwargs)
        self.dist_port = ports.free_port()
        self.node_name = f"hutch-ref-{os.getpid()}-{secrets.token_hex(3)}@localhost"
        self.home_dir = self.work_dir / "home"
        self.mnesia_dir = self.work_dir / "mnesia"
        self.log_dir = self.work_dir / "log"
        self.node_log = self.log_dir / "rabbit.log"
        self.config_file = self.work_dir / "rabbitmq.conf"
        self.plugins_file = self.work_dir / "enabled_plugins"

    def _command(self) -> list[str]:
        if not SERVER_SCRIPT.exists():
            raise RabbitMQNotInstalledError(
                f"{SERVER_SCRIPT} not found: install it with scripts/install-rabbitmq.sh"
            )
        return [str(SERVER_SCRIPT)]

    def _prepare(self) -> None:
        for directory in (self.home_dir, self.mnesia_dir, self.log_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(self._config())
        self.plugins_file.write_text("[rabbitmq_management].\n")
        (self.work_dir / "rabbitmq-env.conf").write_text("")

    def _config(self) -> str:
        # loopback_users stays at its default: guest may connect, from loopback only.
        return "\n".join(
            [
                f"listeners.tcp.default = {self.host}:{self.amqp_port}",
                f"management.tcp.ip = {self.host}",
                f"management.tcp.port = {self.http_port}",
                f"default_user = {self.username}",
                f"default_pass = {self.password}",
                "log.console = false",
                "log.file.level = info",
                "",
            ]
        )

    def _environment(self) -> dict[str, str]:
        inherited = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("RABBITMQ_", "ERL_")) and key != "HOME"
        }
        return inherited | {
            "HOME": str(self.home_dir),  # Erlang cookie of our own
            "RABBITMQ_NODENAME": self.node_name,
            "RABBITMQ_CONF_ENV_FILE": str(self.work_dir / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(self.config_file),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.work_dir / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.plugins_file),
            "RABBITMQ_MNESIA_BASE": str(self.mnesia_dir),
            "RABBITMQ_LOG_BASE": str(self.log_dir),
            "RABBITMQ_LOGS": str(self.node_log),
            "RABBITMQ_PID_FILE": str(self.work_dir / "rabbit.pid"),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_ADDRESS": self.host,
        }

    def _log_files(self) -> list[Path]:
        return [self.console_log, self.node_log]

    def version(self) -> str | None:
        """The rabbitmq_version the management API reports."""
        data = self.overview()
        return None if data is None else str(data.get("rabbitmq_version"))

    def rabbitmqctl(
        self,
        *args: str,
        timeout: float = 60.0,
        check: bool = True,
        env: dict[str, str] | None = None,
        node: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run rabbitmqctl against this node (slow: ~1-2 s of CLI start-up per call).

        ``check=False`` returns failures too (their exit code is under test); ``env`` overrides
        the node's environment (another HOME is another Erlang cookie: a CLI the node refuses);
        ``node`` names another node (one that is not running: a broker that is down). stdin is
        empty, so add_user without a password fails as it does in a script.
        """
        return subprocess.run(  # noqa: S603 - fixed binary, arguments from the test
            [str(CTL_SCRIPT), "-n", node or self.node_name, *args],
            env=self._environment() | (env or {}),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )


def installed() -> bool:
    """True when the Debian rabbitmq-server package's scripts and Erlang are present."""
    return SERVER_SCRIPT.exists() and shutil.which("erl") is not None
