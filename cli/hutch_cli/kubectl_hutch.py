"""``kubectl hutch``: the Kubernetes user's tool for Hutch Brokers, a kubectl plugin.

Why a plugin that shells out to kubectl (as ``kubectl rabbitmq`` does): it then uses exactly the
user's kubeconfig, context, credentials plugins and namespace, with kubectl's own error messages,
and needs no Kubernetes client library in the base wheel. This module is the thin shell: it runs
kubectl, port-forwards, and prints; what to run and how to read the answers is pure
(``kubeargs``, ``kubeplans``, ``kubejobs``). ``ctl`` runs hutchctl in this process against the
port-forward, its password passed in the environment, never on a command line.

Exit codes: 0 done, 1 kubectl or the broker refused (kubectl's message is shown), 2 usage; ``ctl``
returns hutchctl's own (rabbitmqctl's) codes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import webbrowser
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hutch_cli import __version__, hutchctl, kubeargs, kubejobs, kubeplans
from hutch_cli.kubeargs import KubeCommand, Scope

FORWARD_TIMEOUT = 30.0
POLL_SECONDS = 2.0


class KubectlError(Exception):
    """kubectl refused, or an object is not what the plugin needs: one line, exit code 1."""


def kubectl_binary() -> str:
    return os.environ.get("HUTCH_KUBECTL", "kubectl")


def run(scope: Scope, args: Sequence[str], *, stdin: str | None = None) -> str:
    """kubectl's stdout; a KubectlError with its stderr when it fails."""
    command = [kubectl_binary(), *scope.flags(), *args]
    try:
        done = subprocess.run(  # noqa: S603 - kubectl with arguments we built
            command, input=stdin, capture_output=True, text=True, check=False
        )
    except FileNotFoundError as error:
        raise KubectlError(f"cannot run {command[0]}: {error.strerror}") from error
    if done.returncode != 0:
        raise KubectlError(done.stderr.strip() or f"kubectl {' '.join(args)} failed")
    return done.stdout


def passthrough(scope: Scope, args: Sequence[str]) -> int:
    """kubectl with the user's terminal (tables, logs): its exit code is ours."""
    try:
        return subprocess.call([kubectl_binary(), *scope.flags(), *args])  # noqa: S603
    except FileNotFoundError as error:
        raise KubectlError(f"cannot run {kubectl_binary()}: {error.strerror}") from error


def get_json(scope: Scope, *args: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(run(scope, ["get", *args, "-o", "json"]))
    return found


def broker(scope: Scope, name: str) -> dict[str, Any]:
    return get_json(scope, kubeplans.BROKERS, name)


def broker_credentials(scope: Scope, found: dict[str, Any]) -> tuple[str, str]:
    secret = get_json(scope, "secret", kubeplans.default_user_secret(found))
    return kubeplans.secret_value(secret, "username"), kubeplans.secret_value(secret, "password")


@contextlib.contextmanager
def forwarding(scope: Scope, name: str, local: int | None, remote: int) -> Iterator[int]:
    """``kubectl port-forward service/NAME`` on loopback while the block runs: the local port."""
    command = [kubectl_binary(), *scope.flags(), *kubeplans.port_forward(name, local, remote)]
    child = subprocess.Popen(  # noqa: S603 - kubectl with arguments we built
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        port = _first_port(child)
        yield port
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _first_port(child: subprocess.Popen[str]) -> int:
    """Reads kubectl's ``Forwarding from 127.0.0.1:P`` line, then keeps draining its output
    (one line per connection) so a long session never blocks it on a full pipe."""
    found: list[int] = []
    ready = threading.Event()

    def drain() -> None:
        for line in child.stdout or ():
            port = kubeplans.forwarded_port(line)
            if port is not None and not found:
                found.append(port)
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(FORWARD_TIMEOUT) or not found:
        child.terminate()
        try:
            child.wait(5)
            error = child.stderr.read().strip() if child.stderr else ""
        except subprocess.TimeoutExpired:
            error = ""
        raise KubectlError(f"kubectl port-forward did not start: {error or 'no answer in time'}")
    return found[0]


def create(command: KubeCommand) -> int:
    config_file = command.options.get("additional_config_file")
    extra = None
    if config_file:
        try:
            extra = Path(config_file).read_text(encoding="utf-8")
        except OSError as error:
            raise KubectlError(f"cannot read {config_file}: {error.strerror}") from error
    manifest = kubeplans.broker_manifest(command.name, command.options, extra)
    sys.stdout.write(run(command.scope, ["create", "-f", "-"], stdin=json.dumps(manifest)))
    return 0


def get(command: KubeCommand) -> int:
    code = passthrough(command.scope, ["get", kubeplans.BROKERS, command.name])
    if code != 0:
        return code
    sys.stdout.write("\n")
    sys.stdout.flush()
    return passthrough(command.scope, kubeplans.children(command.name))


def secrets(command: KubeCommand) -> int:
    user = command.options.get("user")
    if user:
        found = get_json(command.scope, f"users.{kubeplans.GROUP}", user)
        secret_name = kubeplans.user_secret(found)
    else:
        secret_name = kubeplans.default_user_secret(broker(command.scope, command.name))
    secret = get_json(command.scope, "secret", secret_name)
    sys.stdout.write("".join(line + "\n" for line in kubeplans.credentials_lines(secret)))
    return 0


def manage(command: KubeCommand) -> int:
    found = broker(command.scope, command.name)
    namespace = str(found["metadata"]["namespace"])
    service = get_json(command.scope, "service", command.name)
    scheme, remote = kubeplans.management_port(service, prefer_tls=True)
    username, _ = broker_credentials(command.scope, found)
    with forwarding(command.scope, command.name, command.options.get("port"), remote) as port:
        lines = kubeplans.ui_lines(scheme, port, username, namespace, command.name)
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()
        if command.options.get("open"):
            webbrowser.open(f"{scheme}://localhost:{port}/")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


def ctl(command: KubeCommand) -> int:
    found = broker(command.scope, command.name)
    service = get_json(command.scope, "service", command.name)
    scheme, remote = kubeplans.management_port(service, prefer_tls=False)
    username, password = broker_credentials(command.scope, found)
    with tempfile.TemporaryDirectory(prefix="kubectl-hutch-") as work:
        if scheme == "https":
            _trust(command.scope, found, Path(work))
        with forwarding(command.scope, command.name, 0, remote) as port:
            os.environ.update(
                HUTCH_URL=f"{scheme}://127.0.0.1:{port}",
                HUTCH_USERNAME=username,
                HUTCH_PASSWORD=password,
            )
            return hutchctl.main(list(command.rest))


def _trust(scope: Scope, found: dict[str, Any], work: Path) -> None:
    """For HTTPS through the forward: verify the Service's name, against the Broker's CA when
    its Secret has one (else the system's CAs), as the operator itself verifies the broker."""
    os.environ["HUTCH_SERVER_NAME"] = kubeplans.service_host(found)
    secret_name = kubeplans.tls_ca_secret(found)
    if secret_name is None:
        return
    secret = get_json(scope, "secret", secret_name)
    if "ca.crt" in (secret.get("data") or {}):
        ca_file = work / "ca.crt"
        ca_file.write_text(kubeplans.secret_value(secret, "ca.crt"), encoding="utf-8")
        os.environ["HUTCH_CACERT"] = str(ca_file)


def perf_test(command: KubeCommand) -> int:
    kubejobs.validate(command.rest)
    found = broker(command.scope, command.name)
    statefulset = get_json(command.scope, "statefulset", f"{command.name}-server")
    service = get_json(command.scope, "service", command.name)
    job = kubejobs.perf_test_job(found, statefulset, service, command.rest)
    created = run(command.scope, ["create", "-f", "-", "-o", "name"], stdin=json.dumps(job))
    name = created.strip()
    sys.stdout.write(f"{name} created\n")
    sys.stdout.flush()
    if command.options.get("no_wait"):
        return 0
    deadline = time.monotonic() + job["spec"]["activeDeadlineSeconds"] + 30
    state = "running"
    while state == "running" and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        state = kubejobs.job_state(get_json(command.scope, name))
    with contextlib.suppress(KubectlError):
        sys.stdout.write(run(command.scope, ["logs", name]))
    if state != "succeeded":
        sys.stderr.write(f"{name}: {state}\n")
        return 1
    return 0


def list_paused(command: KubeCommand) -> int:
    every = ["--all-namespaces"] if command.scope.all_namespaces else []
    listed = get_json(command.scope, kubeplans.hutch_kinds(), *every)
    sys.stdout.write("".join(line + "\n" for line in kubeplans.paused_lines(listed)))
    return 0


def pause(command: KubeCommand, *, paused: bool) -> int:
    for args in kubeplans.pause(command.names, paused=paused):
        sys.stdout.write(run(command.scope, args))
    return 0


def dispatch(command: KubeCommand) -> int:
    verb, scope = command.verb, command.scope
    simple = {
        "list": lambda: passthrough(scope, kubeplans.listing(scope)),
        "delete": lambda: passthrough(scope, ["delete", kubeplans.BROKERS, *command.names]),
        "tail": lambda: passthrough(scope, kubeplans.tail(
            command.name, follow=not command.options["no_follow"], lines=command.options["lines"])),
        "create": lambda: create(command),
        "get": lambda: get(command),
        "secrets": lambda: secrets(command),
        "manage": lambda: manage(command),
        "ctl": lambda: ctl(command),
        "perf-test": lambda: perf_test(command),
        "list-paused": lambda: list_paused(command),
        "pause-reconciliation": lambda: pause(command, paused=True),
        "resume-reconciliation": lambda: pause(command, paused=False),
    }  # fmt: skip
    if verb in simple:
        return simple[verb]()
    if verb == "version":
        sys.stdout.write(f"kubectl-hutch {__version__}\n")
        return 0
    sys.stdout.write(USAGE)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        command = kubeargs.parse(sys.argv[1:] if argv is None else argv)
    except kubeargs.UsageError as error:
        sys.stderr.write(f"kubectl hutch: {error}\n(kubectl hutch help lists the commands)\n")
        return 2
    try:
        return dispatch(command)
    except kubeplans.PlanError as error:
        sys.stderr.write(f"kubectl hutch: {error}\n")
        return 2
    except KubectlError as error:
        sys.stderr.write(f"kubectl hutch: {error}\n")
        return 1
    except KeyboardInterrupt:
        return 130


USAGE = """\
kubectl hutch: Hutch Brokers from kubectl (docs/kubectl-hutch.md)

Usage: kubectl hutch [-n NAMESPACE] [--context CONTEXT] [--kubeconfig FILE] COMMAND ...

  create NAME [--replicas N] [--memory 1Gi] [--cpu-request 500m] [--storage-size 10Gi]
              [--storage-class C] [--service ClusterIP|NodePort|LoadBalancer]
              [--tls-secret S [--tls-ca-secret S] [--disable-non-tls-listeners]]
              [--image I] [--allow-namespace NS] [--additional-config-file F] ...
  list [-A]                         every Broker
  get NAME                          the Broker and what the operator made for it
  delete NAME...                    delete Brokers (their children go with them)
  secrets NAME [--user USER]        the default user's (or a User's) username and password
  manage NAME [--port P] [--open]   port-forward the management port; print (open) the UI's URL
  ctl NAME -- VERB [ARGS]           hutchctl against the Broker through a port-forward
  perf-test NAME [--no-wait] [-x N -y N -z SECONDS -s BYTES -c WINDOW -f persistent ...]
                                    a load generator as a Job in the Broker's image; its figures
  tail NAME [--no-follow] [--tail N]  the broker's log
  pause-reconciliation [KIND/]NAME...   the operator leaves the object alone (default KIND broker)
  resume-reconciliation [KIND/]NAME...
  list-paused [-A]                  objects whose reconciliation is paused
  version, --version                the plugin's version
"""
