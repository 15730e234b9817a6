"""The installed kubectl-hutch script against a scripted kubectl: what it runs, what it prints,
and its exit codes when kubectl refuses. The real kubectl and cluster are in
tests/operator/test_kubectl_hutch_node.py; this covers the failure paths a cluster rarely shows.
"""

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hutch_demo import certs
from hutch_testing.tlsbrokers import TLSHutchBroker

pytestmark = pytest.mark.broker  # level broker: runs kubectl-hutch against a fake kubectl

PLUGIN = shutil.which("kubectl-hutch", path=str(Path(sys.executable).parent))

# A kubectl that logs each call (argv and stdin) and answers from a table of argv prefixes.
FAKE = """\
import json, sys
calls = sys.argv[1]
argv = sys.argv[2:]
with open(calls, "a") as log:
    log.write(json.dumps({"argv": argv, "stdin": "" if sys.stdin.isatty() else sys.stdin.read()}) + "\\n")
answers = json.load(open(calls + ".answers"))
for prefix, (code, out, err) in answers:
    if argv[: len(prefix)] == prefix:
        sys.stdout.write(out); sys.stderr.write(err); sys.exit(code)
sys.exit(0)
"""


@pytest.fixture
def kubectl(tmp_path: Path):
    calls = tmp_path / "calls"
    script = tmp_path / "kubectl"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "fake.py"} {calls} "$@"\n')
    script.chmod(0o755)
    (tmp_path / "fake.py").write_text(FAKE)

    def run(*args: str, answers: list | None = None) -> tuple[subprocess.CompletedProcess, list]:
        assert PLUGIN is not None, "kubectl-hutch is not installed: run make bootstrap"
        Path(f"{calls}.answers").write_text(json.dumps(answers or []))
        calls.write_text("")
        done = subprocess.run(
            [PLUGIN, *args], capture_output=True, text=True, timeout=60, check=False,
            env={"PATH": "/usr/bin:/bin", "HUTCH_KUBECTL": str(script)}, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return done, [json.loads(line) for line in calls.read_text().splitlines()]

    return run


def test_create_sends_the_manifest_on_stdin_with_the_scope(kubectl) -> None:
    done, calls = kubectl(
        "create", "b", "-n", "team-a", "--memory", "1Gi",
        answers=[[["--namespace=team-a", "create"], [0, "broker.hutch.dev/b created\n", ""]]],
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "broker.hutch.dev/b created\n")
    [call] = calls
    assert call["argv"] == ["--namespace=team-a", "create", "-f", "-"]
    manifest = json.loads(call["stdin"])
    assert manifest["spec"]["resources"]["limits"] == {"memory": "1Gi"}


def test_kubectls_refusal_is_one_line_and_exit_code_1(kubectl) -> None:
    refusal = 'Error from server (NotFound): brokers.hutch.dev "nope" not found\n'
    done, _ = kubectl("secrets", "nope", answers=[[["get"], [1, "", refusal]]])
    assert done.returncode == 1
    assert done.stderr == f"kubectl hutch: {refusal}"


def test_bad_input_runs_no_kubectl(kubectl) -> None:
    for argv in (["create", "b", "--memory", "lots"], ["pause-reconciliation", "b", "pod/x"],
                 ["perf-test", "b", "-z", "0"], ["ctl", "b"], ["frobnicate"]):  # fmt: skip
        done, calls = kubectl(*argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.startswith("kubectl hutch: ") and calls == [], (argv, calls)


def test_a_port_forward_that_cannot_listen_says_why(kubectl) -> None:
    broker = {"metadata": {"name": "b", "namespace": "ns"}}
    service = {
        "metadata": {"name": "b"},
        "spec": {"ports": [{"name": "management", "port": 15672}]},
    }
    secret = {"metadata": {"name": "b-default-user"},
              "data": {"username": "aHV0Y2g=", "password": "cHc="}}  # fmt: skip
    busy = "Unable to listen on port 15672: address already in use\n"
    done, _ = kubectl(
        "manage", "b",
        answers=[[["get", "brokers.hutch.dev"], [0, json.dumps(broker), ""]],
                 [["get", "service"], [0, json.dumps(service), ""]],
                 [["get", "secret"], [0, json.dumps(secret), ""]],
                 [["port-forward"], [1, "", busy]]],
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == f"kubectl hutch: kubectl port-forward did not start: {busy}"


def test_pause_annotates_each_object(kubectl) -> None:
    done, calls = kubectl("pause-reconciliation", "b", "queue/q", "--context", "lab")
    assert done.returncode == 0
    assert [c["argv"] for c in calls] == [
        ["--context=lab", "annotate", "--overwrite", "brokers.hutch.dev", "b",
         "hutch.dev/pause-reconciliation=true"],
        ["--context=lab", "annotate", "--overwrite", "queues.hutch.dev", "q",
         "hutch.dev/pause-reconciliation=true"],
    ]  # fmt: skip


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_ctl_to_a_tls_only_broker_verifies_its_service_name_with_its_ca(kubectl, tmp_path) -> None:
    """The scripted port-forward 'forwards' straight to a real TLS-only hutch-broker whose
    certificate names only the Service: hutchctl must verify that name against the CA from
    the Broker's ca Secret while it connects to loopback."""
    authority = certs.Authority()
    leaf = authority.issue("hutch-broker", hosts=("b.ns.svc",))
    broker = TLSHutchBroker(leaf=leaf, work_dir=tmp_path / "tls").start()
    try:
        found = {"metadata": {"name": "b", "namespace": "ns"},
                 "spec": {"tls": {"secretName": "tls", "caSecretName": "ca"}}}  # fmt: skip
        service = {"metadata": {"name": "b"},
                   "spec": {"ports": [{"name": "management-tls", "port": 15671}]}}  # fmt: skip
        user = {"metadata": {"name": "b-default-user"},
                "data": {"username": b64(broker.username), "password": b64(broker.password)}}  # fmt: skip
        ca = {"metadata": {"name": "ca"}, "data": {"ca.crt": b64(authority.pem.decode())}}
        forward = f"Forwarding from 127.0.0.1:{broker.https_port} -> 15671\n"
        answers = [
            [["get", "brokers.hutch.dev"], [0, json.dumps(found), ""]],
            [["get", "service"], [0, json.dumps(service), ""]],
            [["get", "secret", "b-default-user"], [0, json.dumps(user), ""]],
            [["get", "secret", "ca"], [0, json.dumps(ca), ""]],
            [["port-forward"], [0, forward, ""]],
        ]
        done, calls = kubectl("ctl", "b", "--", "-q", "list_vhosts", answers=answers)
        assert (done.returncode, done.stdout, done.stderr) == (0, "name\n/\n", "")
        assert calls[-1]["argv"] == ["port-forward", "service/b", "--address=127.0.0.1", ":15671"]
        # The CA is what makes it work: without a ca.crt the system's CAs refuse the certificate.
        answers[3] = [["get", "secret", "ca"], [0, json.dumps({"data": {}}), ""]]
        refused = kubectl("ctl", "b", "--", "-q", "list_vhosts", answers=answers)[0]
        assert refused.returncode == 69 and "certificate" in refused.stderr.lower(), refused
    finally:
        broker.stop()
