"""Launchers for the chain's host processes: port-forwards to broker Pods and Spark jobs.

Why: the operator and the brokers run in Pods (chain.py), but the publishers, consumers and
Spark jobs of the quickstart and the e2e suite run on this host. They reach a broker through
``kubectl port-forward svc/<broker>`` on loopback ports, and every such process is started in
its own session and stopped by its own PID (process group) at the end, never by name. The
operator's rendering of a Broker (``<broker>-config``, ``<broker>-default-user``) is read here
too: the quickstart prints it and the clients log in with it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import ssl
import subprocess
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from hutch_demo import clienttls, clusters, ports, probes, processes

GRACE_SECONDS = 10.0
_RUNNING: weakref.WeakSet[Child] = weakref.WeakSet()
CONFIG_KEY = "hutch-broker.conf"


@dataclass(eq=False)  # hashable by identity: tracked in a WeakSet
class Child:
    """A process we started in its own session; ``stop()`` signals exactly its group."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, grace: float = GRACE_SECONDS) -> int:
        """SIGTERM to the group, ``grace`` seconds, SIGKILL to the group, reap."""
        if self.proc.poll() is None:
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        self.signal_group(signal.SIGKILL)  # leftovers of the group (Spark's JVM, workers)
        return self.proc.wait()

    def kill(self) -> int:
        """SIGKILL to the whole group at once: a crash, as the driver-kill test needs."""
        self.signal_group(signal.SIGKILL)
        return self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def spawn(name: str, command: list[str], log_path: Path, env: dict[str, str]) -> Child:
    """Starts a child in its own session with stdout+stderr to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own fixed commands
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    child = Child(name, proc, log_path)
    _RUNNING.add(child)
    return child


@atexit.register
def _stop_leftovers() -> None:
    """A script that forgot ``stop()`` (or died of an exception) leaves no children behind."""
    for child in list(_RUNNING):
        with contextlib.suppress(Exception):
            child.stop(grace=5)


def record_pid(run_dir: Path | None, role: str, pid: int) -> None:
    """Appends to the plane's ``pids`` so the next run reaps us if this one is SIGKILLed.

    The line is ``ROLE PID EXE``, space-separated, so a role's own spaces become dashes."""
    if run_dir is None or not (run_dir / "pids").is_file():
        return
    role = "-".join(role.split())
    with contextlib.suppress(OSError):
        exe = os.readlink(f"/proc/{pid}/exe")
        with (run_dir / "pids").open("a") as pids:
            pids.write(f"{role} {pid} {exe}\n")


@dataclass
class Endpoint(processes.Addressed):
    """A broker on loopback as the chain sees it (what HutchBroker offers, minus the process)."""

    amqp_port: int
    http_port: int
    username: str = "guest"
    password: str = "guest"  # noqa: S105 - replaced by the Secret's password once known
    host: str = ports.LOOPBACK
    ca_pem: str | None = None  # a TLS Broker: AMQPS and HTTPS, trusting only this CA
    server_name: str | None = None  # the name AMQPS verifies (its Service), else ``host``

    @property
    def amqp_url(self) -> str:
        scheme = "amqps" if self.ca_pem else "amqp"
        return f"{scheme}://{self.username}:{self.password}@{self.host}:{self.amqp_port}/%2F"

    @property
    def http_url(self) -> str:
        return f"{'https' if self.ca_pem else 'http'}://{self.host}:{self.http_port}"

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context verifying chain and host name against ``ca_pem`` (None: plain)."""
        return ssl.create_default_context(cadata=self.ca_pem) if self.ca_pem else None

    @classmethod
    def allocate(cls) -> Endpoint:
        amqp, http = ports.free_ports(2)
        return cls(amqp_port=amqp, http_port=http)


# --- the broker -------------------------------------------------------------------------------


@dataclass
class Rendered:
    """What the operator wrote for one Broker: its config file and its default user."""

    config: str
    username: str
    password: str


def read_rendered(
    cluster: clusters.Cluster, namespace: str, name: str, timeout: float = 60
) -> Rendered:
    """Waits for ``<name>-config`` and ``<name>-default-user`` and returns their contents."""

    def probe() -> Rendered | None:
        configmap = cluster.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}-config")
        user = clusters.secret_data(cluster, namespace, f"{name}-default-user")
        if not configmap or not user:
            return None
        text = (configmap.get("data") or {}).get(CONFIG_KEY)
        return Rendered(text, user["username"], user["password"]) if text else None

    rendered: Rendered = clusters.wait_for(
        probe, f"ConfigMap {name}-config and Secret {name}-default-user", timeout=timeout
    )
    return rendered


def start_port_forward(
    cluster: clusters.Cluster,
    namespace: str,
    name: str,
    endpoint: Endpoint,
    log_path: Path,
    timeout: float = 60,
) -> Child:
    """``kubectl port-forward svc/<name>`` on loopback; ready when AMQP answers through it
    (AMQPS to the TLS ports, verified, when ``endpoint`` has a CA)."""
    context = endpoint.ssl_context
    amqp, http = clienttls.service_ports(tls=context is not None)
    command = [
        str(cluster.kubectl_path),
        f"--kubeconfig={cluster.kubeconfig}",
        "port-forward",
        "-n",
        namespace,
        f"svc/{name}",
        "--address=127.0.0.1",
        f"{endpoint.amqp_port}:{amqp}",
        f"{endpoint.http_port}:{http}",
    ]
    child = spawn(f"port-forward-{name}", command, log_path, dict(os.environ))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.running:
            raise clusters.ClusterError(f"port-forward exited:\n{child.log_tail()}")
        if _answers(endpoint, context):
            return child
        time.sleep(0.3)
    child.stop()
    raise clusters.ClusterError(f"port-forward to svc/{name} not answering:\n{child.log_tail()}")


def _answers(endpoint: Endpoint, context: ssl.SSLContext | None) -> bool:
    if context is None:
        return probes.amqp_answers(endpoint.host, endpoint.amqp_port)
    server_name = endpoint.server_name or endpoint.host
    return probes.amqps_answers(endpoint.host, endpoint.amqp_port, context, server_name)
