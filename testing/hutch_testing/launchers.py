"""Launchers for the chain's processes: the operator, the broker it configured, port-forwards.

Why: on the local plane a Broker's Pod is a kwok fiction (Running, a fake IP, no container),
so the chain runs the broker itself as a local process with exactly the configuration the
operator rendered into ``<broker>-config`` and the user the operator generated into
``<broker>-default-user`` (test-cluster.md §4.1). On a real cluster the broker is the Pod,
reached through ``kubectl port-forward``. Either way the operator runs here as a child process
and reaches the broker at a loopback address through ``HUTCH_BROKER_ADDRESSES``, and every
process is stopped by its own PID (process group) at the end, never by name.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from hutch_testing import brokers, clusters, ports, probes, processes

GRACE_SECONDS = 10.0
_RUNNING: weakref.WeakSet[Child] = weakref.WeakSet()
CONFIG_KEY = "hutch-broker.conf"
# The StatefulSet hands the default user to the container as HUTCH_DEFAULT_USER/PASS; the broker
# reads users from its config file only, so the local process gets them as config lines.
CREDENTIAL_LINES = "# the Pod's HUTCH_DEFAULT_USER/HUTCH_DEFAULT_PASS (Secret {secret})\n"


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
    """Appends to the plane's ``pids`` so the next run reaps us if this one is SIGKILLed."""
    if run_dir is None or not (run_dir / "pids").is_file():
        return
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

    @classmethod
    def allocate(cls) -> Endpoint:
        amqp, http = ports.free_ports(2)
        return cls(amqp_port=amqp, http_port=http)

    def address_entry(self, namespace: str, name: str) -> str:
        """One ``HUTCH_BROKER_ADDRESSES`` entry (hutch_operator.config)."""
        amqp = f"amqp://{self.host}:{self.amqp_port}"
        return f"{namespace}/{name}={self.http_url}|{amqp}"


# --- the operator ---------------------------------------------------------------------------


@dataclass
class OperatorSettings:
    """How the chain runs the operator: namespaces, broker addresses and fast timers."""

    namespaces: list[str]
    addresses: dict[tuple[str, str], Endpoint] = field(default_factory=dict)
    status_period: float = 2.0  # Broker Available within seconds of the broker answering
    sync_period: float = 30.0  # drift sweep and Queue stats

    def environment(self, kubeconfig: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            KUBECONFIG=str(kubeconfig),
            HUTCH_BROKER_ADDRESSES=",".join(
                ep.address_entry(ns, name) for (ns, name), ep in self.addresses.items()
            ),
            HUTCH_BROKER_STATUS_PERIOD=str(self.status_period),
            HUTCH_SYNC_PERIOD=str(self.sync_period),
            HUTCH_METRICS_PORT="0",  # 8080 may be taken; the chain does not scrape it
            PYTHONUNBUFFERED="1",
        )
        return env


def start_operator(
    kubeconfig: Path, settings: OperatorSettings, log_path: Path, timeout: float = 60
) -> Child:
    """``python -m hutch_operator --standalone -n <ns>...``; ready when its liveness answers."""
    liveness = ports.free_port()
    command = [sys.executable, "-m", "hutch_operator", "--standalone"]
    for namespace in settings.namespaces:
        command += ["-n", namespace]
    command.append(f"--liveness=http://127.0.0.1:{liveness}/healthz")
    child = spawn("operator", command, log_path, settings.environment(kubeconfig))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.running:
            raise clusters.ClusterError(f"operator exited:\n{child.log_tail()}")
        if _http_ok(f"http://127.0.0.1:{liveness}/healthz"):
            return child
        time.sleep(0.2)
    child.stop()
    raise clusters.ClusterError(f"operator not live after {timeout:.0f}s:\n{child.log_tail()}")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - loopback
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError):
        return False


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


def start_local_broker(
    rendered: Rendered, endpoint: Endpoint, work_dir: Path, secret_name: str
) -> brokers.HutchBroker:
    """``hutch-broker --amqp-port A --http-port H --data-dir D --config <rendered>``.

    The operator's file is written unchanged to ``hutch-broker.conf``; the file the process
    reads appends the default user the Pod would get from the Secret through its environment.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / CONFIG_KEY).write_text(rendered.config)
    local_conf = work_dir / "hutch-broker.local.conf"
    local_conf.write_text(
        rendered.config
        + CREDENTIAL_LINES.format(secret=secret_name)
        + f"default_user = {rendered.username}\ndefault_pass = {rendered.password}\n"
    )
    local_conf.chmod(0o600)
    broker = brokers.HutchBroker(
        data_dir=work_dir / "data",
        work_dir=work_dir,
        extra_args=["--config", str(local_conf)],
        username=rendered.username,
        password=rendered.password,
    )
    broker.amqp_port, broker.http_port = endpoint.amqp_port, endpoint.http_port
    endpoint.username, endpoint.password = rendered.username, rendered.password
    return broker.start()


def start_port_forward(
    cluster: clusters.Cluster,
    namespace: str,
    name: str,
    endpoint: Endpoint,
    log_path: Path,
    timeout: float = 60,
) -> Child:
    """External clusters: ``kubectl port-forward svc/<name>`` to the endpoint's ports."""
    command = [
        str(cluster.kubectl_path),
        f"--kubeconfig={cluster.kubeconfig}",
        "port-forward",
        "-n",
        namespace,
        f"svc/{name}",
        "--address=127.0.0.1",
        f"{endpoint.amqp_port}:5672",
        f"{endpoint.http_port}:15672",
    ]
    child = spawn(f"port-forward-{name}", command, log_path, dict(os.environ))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.running:
            raise clusters.ClusterError(f"port-forward exited:\n{child.log_tail()}")
        if probes.amqp_answers(endpoint.host, endpoint.amqp_port):
            return child
        time.sleep(0.3)
    child.stop()
    raise clusters.ClusterError(f"port-forward to svc/{name} not answering:\n{child.log_tail()}")
