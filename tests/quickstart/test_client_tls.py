"""``make run --tls``'s clients: decided from the Broker's ``spec.tls``, unchanged without it.

Pure parts (the decision, the Spark submission, the Secrets, the summary) and one loopback run:
the chain's host-side clients (the port-forward's probe, the publisher, the management checks)
against a TLS-only hutch-broker serving the quickstart's kind of certificate.
"""

from __future__ import annotations

import base64
import json
import shlex
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pika
import pytest
import yaml  # type: ignore[import-untyped]
from hutch_demo import (
    certs,
    chain,
    clienttls,
    launchers,
    management,
    pipeline,
    probes,
    quickstart,
    sparkpods,
    sparksubmit,
    summaries,
)
from hutch_testing.tlsbrokers import TLSHutchBroker


def example(name: str, namespace: str = "quickstart") -> dict[str, Any]:
    broker: dict[str, Any] = yaml.safe_load((chain.EXAMPLES / name).read_text())
    broker["metadata"]["namespace"] = namespace  # as the apiserver returns it
    return broker


def test_the_plain_example_keeps_plain_clients() -> None:
    broker = example("broker.yaml")
    assert clienttls.broker_tls(broker) is None
    assert clienttls.service_ports(tls=False) == (5672, 15672)


def test_the_tls_example_gives_verified_tls_clients() -> None:
    tls = clienttls.broker_tls(example("broker-tls.yaml"))
    assert tls == clienttls.BrokerTLS(
        ca_secret="hutch-ca", server_name="hutch.quickstart.svc", plain_listeners=False
    )
    assert tls.amqp_uri() == "amqps://hutch.quickstart.svc:5671/%2F"
    assert tls.ca_file == "/etc/hutch-ca/ca.crt"
    assert clienttls.service_ports(tls=True) == (5671, 15671)


def test_the_tls_example_names_the_secrets_the_quickstart_makes() -> None:
    spec = example("broker-tls.yaml")["spec"]["tls"]
    assert (spec["secretName"], spec["caSecretName"]) == (
        quickstart.TLS_SECRET,
        quickstart.CA_SECRET,
    )


@pytest.mark.parametrize(
    ("tls", "expected"),
    [
        ({"secretName": "cert"}, ("cert", True)),  # the CA from the certificate's own Secret
        ({"secretName": "cert", "caSecretName": "ca"}, ("ca", True)),
        ({}, None),
        (None, None),
    ],
)
def test_the_ca_secret_and_listeners_follow_spec_tls(
    tls: dict[str, str] | None, expected: tuple[str, bool] | None
) -> None:
    broker = {"metadata": {"name": "b", "namespace": "n"}, "spec": {"tls": tls}}
    found = clienttls.broker_tls(broker)
    assert (None if found is None else (found.ca_secret, found.plain_listeners)) == expected


def submission(**kwargs: Any) -> sparksubmit.Submission:
    return sparksubmit.Submission(
        api_server="https://127.0.0.1:6443", namespace="ns", broker="hutch", queue="q",
        credentials_secret="user-creds", claim="data", pod_template=Path("/t.json"), **kwargs,
    )  # fmt: skip


def test_a_plain_submission_is_unchanged() -> None:
    sub = submission()
    assert sub.amqp_uri == "amqp://hutch.ns.svc.cluster.local:5672/%2F"
    assert not any("CA_FILE" in key for key in sparksubmit.confs(sub))
    assert sparksubmit.pod_template() == {
        "apiVersion": "v1", "kind": "Pod", "spec": {"securityContext": {"fsGroup": 185}},
    }  # fmt: skip


def test_a_tls_submission_dials_amqps_and_mounts_only_the_ca() -> None:
    sub = submission(ca_secret="hutch-ca")
    assert sub.amqp_uri == "amqps://hutch.ns.svc:5671/%2F"  # the certificate's name
    confs = sparksubmit.confs(sub)
    assert confs["spark.kubernetes.driverEnv.HUTCH_AMQP_URI"] == sub.amqp_uri
    assert confs["spark.kubernetes.driverEnv.HUTCH_AMQP_CA_FILE"] == "/etc/hutch-ca/ca.crt"
    spec = sparksubmit.pod_template("hutch-ca")["spec"]
    assert spec["volumes"] == [
        {"name": "hutch-ca",
         "secret": {"secretName": "hutch-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    ]  # fmt: skip
    (container,) = spec["containers"]
    assert container == {  # unnamed: Spark names it spark-kubernetes-driver / -executor
        "volumeMounts": [{"name": "hutch-ca", "mountPath": "/etc/hutch-ca", "readOnly": True}]
    }


@pytest.fixture(scope="module")
def leaf() -> certs.Leaf:
    hosts = clienttls.server_hosts("hutch", "quickstart")
    return certs.Authority("test CA").issue(hosts[0], hosts=hosts)


def test_the_secrets_have_cert_managers_shape_and_a_ca_only_secret(leaf: certs.Leaf) -> None:
    tls, ca = quickstart.tls_secrets(leaf)
    assert (tls["type"], tls["metadata"]["name"]) == ("kubernetes.io/tls", "hutch-tls")
    assert sorted(tls["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    assert (ca["metadata"]["name"], sorted(ca["data"])) == ("hutch-ca", ["ca.crt"])
    assert base64.b64decode(ca["data"]["ca.crt"]) == leaf.ca_pem


def endpoint(amqp: int = 1, http: int = 2, **kwargs: Any) -> launchers.Endpoint:
    return launchers.Endpoint(amqp_port=amqp, http_port=http, username="u", password="p", **kwargs)


def test_a_plain_endpoint_connects_as_before() -> None:
    plain = endpoint()
    assert (plain.amqp_url, plain.http_url) == ("amqp://u:p@127.0.0.1:1/%2F", "http://127.0.0.1:2")
    assert plain.ssl_context is None
    assert pipeline.parameters(plain).ssl_options is None


def test_an_endpoint_with_a_ca_verifies_the_service_name(leaf: certs.Leaf) -> None:
    tls = endpoint(ca_pem=leaf.ca_pem.decode(), server_name="hutch.quickstart.svc")
    assert (tls.amqp_url, tls.http_url) == ("amqps://u:p@127.0.0.1:1/%2F", "https://127.0.0.1:2")
    context = tls.ssl_context
    assert context is not None
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)
    options = pipeline.parameters(tls).ssl_options
    assert options is not None
    assert options.server_hostname == "hutch.quickstart.svc"


def test_the_summary_says_how_the_clients_connected() -> None:
    summary = summaries.Summary(
        namespace="quickstart", broker="hutch", kubeconfig="k", amqp_uri="a", management_url="m",
        watermark_bytes=None, status_watermark_bytes=None, queues=[], published=0, duplicates=0,
        consumed=0, dead_lettered=0, expected_events=0, results=[], parquet="",
    )  # fmt: skip
    assert "Clients" not in summary.render()
    summary.clients = ["TLS: AMQPS 5671"]
    assert "Clients (the Broker has spec.tls):\n  TLS: AMQPS 5671" in summary.render()


def _forwarded(broker: TLSHutchBroker, leaf: certs.Leaf) -> launchers.Endpoint:
    """The TLS-only broker as the chain's port-forward shows it: 127.0.0.1, verified as the
    Service's name against the CA."""
    return launchers.Endpoint(
        amqp_port=broker.amqps_port, http_port=broker.https_port, username=broker.username,
        password=broker.password, ca_pem=leaf.ca_pem.decode(), server_name="hutch.quickstart.svc",
    )  # fmt: skip


@pytest.mark.broker  # starts processes (hutch_testing.levels)
@pytest.mark.timeout(90)
def test_the_host_clients_speak_verified_tls_to_a_tls_only_broker(leaf: certs.Leaf) -> None:
    """What the quickstart does through its port-forward, on loopback: the probe, a publish
    with confirms and the management checks, all verified against the CA; 5672 is closed."""
    with TLSHutchBroker(leaf=leaf, plain=False) as broker:
        client = _forwarded(broker, leaf)
        context = client.ssl_context
        assert context is not None
        assert probes.amqps_answers(client.host, client.amqp_port, context, "hutch.quickstart.svc")
        assert not probes.amqps_answers(client.host, client.amqp_port, context, "other.svc")
        connection = pika.BlockingConnection(pipeline.parameters(client))
        try:
            channel = connection.channel()
            channel.queue_declare("orders-eu")
            channel.confirm_delivery()
            channel.basic_publish("", "orders-eu", b"{}")
            listed = management.Management(client).get("/connections")
            assert listed.ok, listed
            assert [c.get("ssl") for c in listed.body] == [True]
        finally:
            connection.close()
        assert management.Management(client).queue("orders-eu")["messages"] == 1


@pytest.mark.broker  # starts processes (hutch_testing.levels)
@pytest.mark.timeout(90)
def test_keep_prints_a_curl_command_that_verifies_the_broker_through_the_forward(
    leaf: certs.Leaf, tmp_path: Path
) -> None:
    """``--keep --tls``: the printed command, run as printed, reaches the management API on
    127.0.0.1 and verifies the Service's name against the saved CA; without the CA it fails."""
    with TLSHutchBroker(leaf=leaf, plain=False) as broker:
        client = _forwarded(broker, leaf)
        ca_file = tmp_path / "ca.crt"
        ca_file.write_text(client.ca_pem or "")
        said, command = summaries.tls_help(client, ca_file)
        assert str(ca_file) in said and "hutch.quickstart.svc" in said
        argv = shlex.split(command)
        done = subprocess.run([*argv, "-sS", "--fail"], capture_output=True, text=True,
                              timeout=30, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["product_name"]
        without_ca = [a for a in argv if a not in ("--cacert", str(ca_file))]
        refused = subprocess.run([*without_ca, "-sS", "--fail"], capture_output=True,
                                 text=True, timeout=30, check=False)  # fmt: skip
        assert refused.returncode == 60, refused.stderr  # curl: peer certificate not verified


class _Listed:
    def __init__(self, body: Any) -> None:
        self.ok, self.body = True, body


class _Management:
    """The broker's management API as _wait_job reads it: the job's connection appears on the
    second listing."""

    context = object()  # a TLS endpoint

    def __init__(self) -> None:
        self.listings = 0

    def get(self, path: str) -> _Listed:
        if path != "/connections":
            return _Listed({"message_stats": {"ack": 0}})
        self.listings += 1
        users = ["publisher"] + ([sparkpods.JOB_USER] if self.listings >= 2 else [])
        return _Listed([{"user": user, "ssl": True} for user in users])


class _Child:
    def __init__(self, polls: int) -> None:
        self.polls = polls
        self.proc = type("Proc", (), {"returncode": 0})()

    @property
    def running(self) -> bool:
        self.polls -= 1
        return self.polls >= 0


class _Job:
    queue = "orders-eu"

    def committed_batches(self) -> int:
        return 0


def test_the_job_wait_stops_listing_connections_once_the_jobs_user_was_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quickstart.time, "sleep", lambda _s: None)
    mgmt = _Management()
    report = quickstart.progress.Progress(total=1, quiet=True)
    seen = quickstart._wait_job(report, _Child(polls=6), mgmt, _Job(), 10)  # type: ignore[arg-type]
    assert seen == {("publisher", True), (sparkpods.JOB_USER, True)}
    assert mgmt.listings == 2  # not one listing per poll for the job's whole run
