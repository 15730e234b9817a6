"""``kubectl hutch`` on the real node: every verb against one Broker the plugin itself created.

Why the real node: the plugin is glue between kubectl, the operator and the broker Pod, and
what can break is only visible there: the Broker it creates must become a running Pod,
``manage``'s port-forward must carry a browser's HTTP request to the Web UI, ``ctl`` must reach
hutchctl's verbs through its own forward, ``perf-test``'s Job must run the generator in the
broker image the node holds and print its figures, and the pause annotation must stop a real
operator from repairing what a user changed, until resumed.

The installed console script runs as a user runs it (a subprocess, kubectl from the plane,
``KUBECONFIG`` in the environment); the operator runs in this process (``node_operator``).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from hutch_testing import brokerpods

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(900)]

PLUGIN = shutil.which("kubectl-hutch", path=str(Path(sys.executable).parent))
NAME = "khutch"


class Plugin:
    def __init__(self, plane: Any, namespace: str) -> None:
        assert PLUGIN is not None, "kubectl-hutch is not installed: run make bootstrap"
        self.namespace = namespace
        self.env = {
            **os.environ,
            "KUBECONFIG": str(plane.kubeconfig),
            "HUTCH_KUBECTL": str(plane.kubectl_path),
        }

    def command(self, *args: str) -> list[str]:
        return [str(PLUGIN), "-n", self.namespace, *args]

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, env=self.env,
            timeout=timeout, check=False,
        )  # fmt: skip


def get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - the forward's http URL
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def figures(text: str) -> dict[str, int]:
    found = {}
    for key in ("sent", "received"):
        match = re.search(rf"^{key}: (\d+) messages, \w+ rate avg: (\d+) msg/s$", text, re.M)
        assert match, f"no {key} figures in:\n{text}"
        found[key], found[f"{key}_rate"] = int(match.group(1)), int(match.group(2))
    confirmed = re.search(r"^confirmed: (\d+), nacked: (\d+)$", text, re.M)
    assert confirmed, text
    found["confirmed"], found["nacked"] = int(confirmed.group(1)), int(confirmed.group(2))
    return found


def test_every_verb_against_one_broker(node_operator: Any, kit: Any) -> None:
    kube = kit.Kube(node_operator, node_operator.create_namespace())
    plugin = Plugin(node_operator, kube.namespace)

    # create: the Broker the plugin makes becomes a running broker Pod; a second create fails.
    made = plugin("create", NAME, "--storage-size", "0", "--memory", "256Mi",
                  "--cpu-request", "100m", "--termination-grace-period", "5")  # fmt: skip
    assert (made.returncode, made.stdout) == (0, f"broker.hutch.dev/{NAME} created\n"), made.stderr
    again = plugin("create", NAME)
    assert again.returncode == 1 and "already exists" in again.stderr, again
    bad = plugin("create", "other", "--memory", "lots")
    assert bad.returncode == 2 and "not a Kubernetes quantity" in bad.stderr
    assert kube.get("brokers", "other") is None
    broker = brokerpods.BrokerPod(node_operator, kube.namespace, NAME).attach()

    listed = plugin("list")
    assert listed.returncode == 0 and NAME in listed.stdout, listed
    got = plugin("get", NAME)
    assert got.returncode == 0, got.stderr
    for child in (f"pod/{NAME}-server-0", f"service/{NAME}", f"secret/{NAME}-default-user"):
        assert child in got.stdout, got.stdout

    # secrets: the default user's credentials, as the Secret holds them.
    shown = plugin("secrets", NAME)
    assert shown.stdout == f"username: {broker.user}\npassword: {broker.password}\n", shown

    # manage: the port-forward carries HTTP to the Web UI and, logged in, to the API.
    manage = subprocess.Popen(
        plugin.command("manage", NAME, "--port", "0"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=plugin.env,
    )  # fmt: skip
    try:
        assert manage.stdout is not None
        first = manage.stdout.readline()
        match = re.match(rf"Management UI of Broker {kube.namespace}/{NAME}: (http://\S+)", first)
        assert match, (first, manage.stderr.read() if manage.poll() is not None else "")
        url = match.group(1)
        status, page = get(url)
        assert status == 200 and "<html" in page.lower(), page[:200]
        assert get(url + "api/overview")[0] == 401
        status, text = get(url + "api/overview", (broker.user, broker.password))
        assert status == 200 and json.loads(text)["product_name"], text[:200]
    finally:
        manage.terminate()
        manage.wait(10)

    # ctl: hutchctl's verbs through the plugin's own forward, with hutchctl's exit codes.
    assert plugin("ctl", NAME, "--", "add_vhost", "kv").returncode == 0
    vhosts = plugin("ctl", NAME, "--", "-q", "list_vhosts", "name")
    assert vhosts.returncode == 0 and "kv" in vhosts.stdout.split(), vhosts
    missing = plugin("ctl", NAME, "--", "delete_user", "nobody")
    assert missing.returncode == 67, missing  # rabbitmqctl's EX_NOUSER, passed through

    # perf-test: a Job in the broker image; its figures come back and add up.
    started = time.monotonic()
    perf = plugin("perf-test", NAME, "-x", "1", "-y", "1", "-z", "5", "-c", "100", "-s", "1000",
                  timeout=400)  # fmt: skip
    took = time.monotonic() - started
    assert perf.returncode == 0, (perf.stdout, perf.stderr)
    counts = figures(perf.stdout)
    assert counts["sent"] > 0 and counts["nacked"] == 0, perf.stdout
    assert counts["sent"] == counts["confirmed"] == counts["received"], perf.stdout

    # tail: the broker's log, each line prefixed with its Pod and container.
    tail = plugin("tail", NAME, "--no-follow", "--tail", "5")
    assert tail.returncode == 0 and f"[pod/{NAME}-server-0/hutch-broker]" in tail.stdout, tail

    pause_and_resume(kube, kit, plugin)

    deleted = plugin("delete", NAME)
    assert deleted.returncode == 0, deleted
    kit.wait_for(lambda: kube.get("brokers", NAME) is None, 60, "Broker deleted")
    print(
        f"\nkubectl hutch perf-test on the node ({took:.0f} s with the Job's start): "
        f"1 producer, 1 consumer, 1000 B, confirm window 100, 5 s: sent {counts['sent']} "
        f"({counts['sent_rate']} msg/s), received {counts['received']} "
        f"({counts['received_rate']} msg/s)\n{perf.stdout}",
        file=sys.__stdout__,
        flush=True,
    )


def pause_and_resume(kube: Any, kit: Any, plugin: Plugin) -> None:
    """A paused Queue is not re-declared when its broker queue is deleted and the operator is
    nudged; a paused Broker's spec change is not applied; both catch up once resumed."""
    kube.create("Queue", "queues", "orders", {"brokerRef": {"name": NAME}})

    def condition(plural: str, name: str, type_: str, wanted: str) -> Any:
        obj = kube.get(plural, name)
        return obj if kit.ready(obj, type_)[0] == wanted else None

    kit.wait_for(lambda: condition("queues", "orders", "Ready", "True"), 60, "Queue Ready")
    paused = plugin("pause-reconciliation", NAME, "queue/orders")
    assert paused.returncode == 0, paused
    for plural, name in (("brokers", NAME), ("queues", "orders")):
        kit.wait_for(lambda p=plural, n=name: condition(p, n, "ReconciliationPaused", "True"),
                     30, f"{plural}/{name} paused")  # fmt: skip
    listed = plugin("list-paused")
    assert f"Broker   {NAME}" in listed.stdout and "Queue    orders" in listed.stdout, listed

    assert plugin("ctl", NAME, "--", "delete_queue", "orders").returncode == 0
    nudge = ["queues.hutch.dev/orders", "hutch.dev/reconcile-requested=paused-test"]
    kube.plane.kubectl("-n", kube.namespace, "annotate", "--overwrite", *nudge)
    generation = kube.get("brokers", NAME)["metadata"]["generation"]
    assert kube.patch_spec("brokers", NAME, {"topologyAllowedNamespaces": ["x"]}).returncode == 0
    time.sleep(8)  # the nudge's update event, a handler run and more, all ignored
    queues = plugin("ctl", NAME, "--", "-q", "list_queues", "name")
    assert "orders" not in queues.stdout.split(), queues.stdout
    status = kube.get("brokers", NAME)["status"]
    assert status["observedGeneration"] < generation + 1, status

    resumed = plugin("resume-reconciliation", NAME, "queue/orders")
    assert resumed.returncode == 0, resumed

    def redeclared() -> bool:
        listed = plugin("ctl", NAME, "--", "-q", "list_queues", "name")
        return "orders" in listed.stdout.split()

    kit.wait_for(redeclared, 60, "orders declared again after resume")
    kit.wait_for(lambda: (kube.get("brokers", NAME)["status"].get("observedGeneration")
                          == generation + 1), 60, "the Broker's spec change applied")  # fmt: skip
    for plural, name in (("brokers", NAME), ("queues", "orders")):
        assert condition(plural, name, "ReconciliationPaused", "False"), f"{plural}/{name}"
    assert plugin("list-paused").stdout == "No paused Hutch objects.\n"
