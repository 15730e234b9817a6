"""``make run ARGS=--keep`` as a user keeps working in it (issue 31 items 4, 5 and 6).

One real kept run (``python -m hutch_testing.quickstart --keep``, its own plane with the real
node), then what the issue's user did in it:

- item 5: it printed the kubectl it uses and the API server URL for Spark's ``--master``, and
  the operator watches every namespace: a Queue in ``team-a`` (admitted by examples/broker.yaml)
  gets Ready;
- item 6: a second Broker, in ``team-b``, gets its volume from the node's provisioner and runs;
- item 4: the broker Pod is deleted, then a client connects through the printed port. Before,
  the port-forward died at that connect and the run stopped the plane and removed its
  directory, silently; now the run says what happened, forwards to the new Pod on the same
  ports, and the connect (with retries while the new Pod starts) publishes and gets a message.

Ctrl-C then ends it, saying which directories it removes. The Pod-level checks of the
provisioner are in tests/k8s/test_provisioner.py; ``keeping`` decides what to say.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pika
import pytest
from hutch_testing.plane import provisioner

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(1200)]

log = logging.getLogger("hutch.test_keep")
NAMESPACE = "quickstart"
POD = "hutch-server-0"


class Kept:
    """The kept run: its process, its output files and what it printed."""

    def __init__(self, work: Path) -> None:
        self.out, self.err = work / "stdout.txt", work / "stderr.txt"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hutch_testing.quickstart", "--keep", "--events", "300"],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def printed(self) -> str:
        return self.out.read_text(errors="replace")

    def said(self) -> str:
        return self.err.read_text(errors="replace")

    def wait_for(self, what: str, probe: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = probe()
            if result:
                return result
            if self.proc.poll() is not None:
                pytest.fail(f"the kept run exited ({self.proc.returncode}) while waiting for "
                            f"{what}:\n{self.said()[-3000:]}")  # fmt: skip
            time.sleep(1)
        pytest.fail(f"timed out after {timeout}s waiting for {what}:\n{self.said()[-3000:]}")

    def field(self, label: str) -> str:
        found = re.search(rf"^\s*{re.escape(label)}\s+(\S+)", self.printed(), re.MULTILINE)
        assert found, (label, self.printed())
        return found.group(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # Ctrl-C, as the user ends it
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def kubectl(kept: dict[str, str], *args: str, stdin: str | None = None) -> Any:
    done = subprocess.run(
        [kept["kubectl"], f"--kubeconfig={kept['kubeconfig']}", *args],
        input=stdin, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, (args, done.stderr)
    return json.loads(done.stdout) if "-ojson" in args else done.stdout


def wait(what: str, probe: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result:
            return result
        time.sleep(1)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def ready(obj: dict[str, Any]) -> bool:
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def connect_and_round_trip(uri: str) -> bool:
    """One client through the printed port: declare, publish with a confirm, get it back."""
    try:
        connection = pika.BlockingConnection(pika.URLParameters(uri))
    except pika.exceptions.AMQPError:
        return False
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("after-the-pod-went")
        channel.basic_publish("", "after-the-pod-went", b"still here")
        method, _, body = channel.basic_get("after-the-pod-went", auto_ack=True)
        return method is not None and body == b"still here"
    except pika.exceptions.AMQPError:
        return False
    finally:
        if connection.is_open:
            connection.close()


def manifest(*objects: dict[str, Any]) -> str:
    return "\n---\n".join(json.dumps(o) for o in objects)


def test_a_kept_run_survives_its_broker_pod_and_serves_every_namespace(tmp_path: Path) -> None:
    run = Kept(tmp_path)
    try:
        run.wait_for("the kept run's help", lambda: "Operator:" in run.printed(), 900)
        kept = {
            "kubeconfig": re.findall(r"export KUBECONFIG=(\S+)", run.printed())[-1],
            "kubectl": run.field("kubectl:"),
            "server": run.field("API server:"),
            "amqp": run.field("AMQP URI:"),
        }
        _the_cluster_it_printed(run, kept)
        _every_namespace_is_watched(kept)
        _a_second_broker_gets_a_volume(kept)
        _the_broker_pod_is_deleted_and_a_client_connects(run, kept)
    finally:
        run.stop()
    said = run.said()
    assert run.proc.returncode == 0, said[-3000:]
    removed = re.search(r"removing the plane's directory (\S+) and the work directory", said)
    assert removed, said[-3000:]
    assert not Path(removed.group(1)).exists()


def _the_cluster_it_printed(run: Kept, kept: dict[str, str]) -> None:
    assert Path(kept["kubectl"]).is_file(), kept
    assert kept["server"].startswith("https://127.0.0.1:"), kept
    assert f"--master k8s://{kept['server']}" in run.printed()
    config = kubectl(kept, "config", "view", "--minify", "-ojson")
    assert config["clusters"][0]["cluster"]["server"] == kept["server"]
    assert "watches every namespace" in run.printed()


def _every_namespace_is_watched(kept: dict[str, str]) -> None:
    """examples/broker.yaml admits team-a; before, no status ever came to objects there."""
    kubectl(kept, "create", "namespace", "team-a")
    queue = {"apiVersion": "hutch.dev/v1alpha1", "kind": "Queue",
             "metadata": {"name": "team-a-orders", "namespace": "team-a"},
             "spec": {"brokerRef": {"name": "hutch", "namespace": NAMESPACE}}}  # fmt: skip
    kubectl(kept, "apply", "-f", "-", stdin=manifest(queue))
    wait("the team-a Queue Ready", lambda: ready(
        kubectl(kept, "get", "queues.hutch.dev", "-n", "team-a", "team-a-orders", "-ojson")))  # fmt: skip


def _a_second_broker_gets_a_volume(kept: dict[str, str]) -> None:
    """Before, its PVC stayed Pending: the node had no provisioner."""
    kubectl(kept, "create", "namespace", "team-b")
    broker = {"apiVersion": "hutch.dev/v1alpha1", "kind": "Broker",
              "metadata": {"name": "second", "namespace": "team-b"},
              "spec": {"persistence": {"size": "1Gi"},
                       "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                     "limits": {"memory": "256Mi"}}}}  # fmt: skip
    kubectl(kept, "apply", "-f", "-", stdin=manifest(broker))
    claim = wait("the second Broker's PVC Bound", lambda: next((
        c for c in kubectl(kept, "get", "pvc", "-n", "team-b", "-ojson")["items"]
        if c.get("status", {}).get("phase") == "Bound"), None))  # fmt: skip
    assert claim["spec"]["storageClassName"] == provisioner.STORAGE_CLASS
    volume = kubectl(kept, "get", "pv", claim["spec"]["volumeName"], "-ojson")
    assert volume["metadata"]["annotations"][provisioner.PROVISIONED_BY] == provisioner.PROVISIONER
    assert Path(volume["spec"]["local"]["path"]).is_dir()
    wait("the second Broker Ready", lambda: ready(
        kubectl(kept, "get", "brokers.hutch.dev", "-n", "team-b", "second", "-ojson")), 240)  # fmt: skip


def _the_broker_pod_is_deleted_and_a_client_connects(run: Kept, kept: dict[str, str]) -> None:
    assert connect_and_round_trip(kept["amqp"])
    before = kubectl(kept, "get", "pod", "-n", NAMESPACE, POD, "-ojson")["metadata"]["uid"]
    began = time.monotonic()
    kubectl(kept, "delete", "pod", "-n", NAMESPACE, POD, "--wait=true")
    connected = run.wait_for(
        "a client through the printed port after the Pod's deletion",
        lambda: connect_and_round_trip(kept["amqp"]), 180,
    )  # fmt: skip
    assert connected
    seconds = time.monotonic() - began
    after = kubectl(kept, "get", "pod", "-n", NAMESPACE, POD, "-ojson")["metadata"]["uid"]
    assert after != before
    assert run.proc.poll() is None, "the kept run ended"
    said = run.said()
    assert f"keep: Pod {POD} " in said, said[-3000:]
    assert f"port-forward re-established to Pod {POD} (uid {after[:8]})" in said, said[-3000:]
    log.warning("connected through the printed port %.1fs after the Pod's deletion began", seconds)
