"""Issue 16, TLS: a Broker with ``spec.tls``, reconciled by the operator over HTTPS.

The operator runs in-process against the apiserver plane; the broker is a real hutch-broker on
loopback serving AMQPS and HTTPS with a certificate made here, reached through
``HUTCH_BROKER_ADDRESSES`` as an ``https://`` URL. So "Available" means the operator completed
a TLS handshake and verified the chain with the CA from the Broker's Secrets, and a wrong CA
must show as ``TLSVerificationFailed`` naming what it trusted.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from hutch_demo import certs
from hutch_testing.tlsbrokers import TLSHutchBroker, TLSRabbitMQ, client_context

pytestmark = pytest.mark.timeout(120)

HOSTS = ("127.0.0.1", "localhost")


def tls_secret(kube: Any, name: str, leaf: certs.Leaf, *, with_ca: bool = True) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name},
        "data": leaf.secret_data(with_ca=with_ca),
    }
    status, reply = kube.plane.api("POST", f"/api/v1/namespaces/{kube.namespace}/secrets", body)
    assert status == 201, reply


def replace_secret_data(kube: Any, name: str, data: dict[str, str]) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/secrets/{name}"
    status, reply = kube.plane.api("GET", path)
    assert status == 200, reply
    reply["data"] = data
    status, reply = kube.plane.api("PUT", path, reply)
    assert status == 200, reply


def point_at(namespace: str, name: str, broker: TLSHutchBroker) -> None:
    """HUTCH_BROKER_ADDRESSES entry with the TLS listeners (the plain ones stay unused)."""
    entries = [e for e in os.environ.get("HUTCH_BROKER_ADDRESSES", "").split(",") if e]
    amqps = f"amqps://{broker.host}:{broker.amqps_port}"
    entries.append(f"{namespace}/{name}={broker.https_url}|{amqps}")
    os.environ["HUTCH_BROKER_ADDRESSES"] = ",".join(entries)


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for item in (obj or {}).get("status", {}).get("conditions", []):
        if item.get("type") == type_:
            return dict(item)
    return {}


@pytest.fixture(scope="module")
def env(operator: Any, crds_applied: Any, kit: Any, tmp_path_factory: Any) -> Iterator[Any]:
    authority = certs.Authority()
    leaf = authority.issue("hutch-broker", hosts=HOSTS)
    broker = TLSHutchBroker(leaf=leaf, work_dir=tmp_path_factory.mktemp("tls")).start()
    namespace = crds_applied.create_namespace()
    kube = kit.Kube(crds_applied, namespace)
    try:
        yield {"kube": kube, "broker": broker, "authority": authority, "leaf": leaf}
    finally:
        broker.stop()


def make_broker(env: Any, kit: Any, name: str, tls: dict[str, Any]) -> None:
    kube = env["kube"]
    point_at(kube.namespace, name, env["broker"])
    kube.secret(f"{name}-default-user", {"username": "guest", "password": "guest"})
    kube.create("Broker", "brokers", name, {"persistence": {"size": "0"}, "tls": tls})


def test_tls_broker_is_reconciled_over_verified_https(env: Any, kit: Any) -> None:
    kube, ns = env["kube"], env["kube"].namespace
    tls_secret(kube, "b-tls", env["leaf"])  # cert-manager's shape, ca.crt included
    make_broker(env, kit, "b", {"secretName": "b-tls"})
    kit.wait_for(
        lambda: condition(kube.get("brokers", "b"), "Available").get("status") == "True",
        30,
        "Available over HTTPS",
    )
    status = kube.get("brokers", "b")["status"]
    assert status["endpoint"] == {
        "amqp": f"amqps://b.{ns}.svc:5671",
        "management": f"https://b.{ns}.svc:15671",
    }
    assert env["broker"].https_url in condition(kube.get("brokers", "b"), "Available")["message"]
    api = kube.plane.api
    _, configmap = api("GET", f"/api/v1/namespaces/{ns}/configmaps/b-config")
    assert "ssl_options.certfile = /etc/hutch-tls/tls.crt" in configmap["data"]["hutch-broker.conf"]
    _, sts = api("GET", f"/apis/apps/v1/namespaces/{ns}/statefulsets/b-server")
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "b-tls"
    _, service = api("GET", f"/api/v1/namespaces/{ns}/services/b")
    assert [p["port"] for p in service["spec"]["ports"]] == [5672, 15672, 5671, 15671]

    # A topology object on this Broker goes through the same verified HTTPS client.
    kube.create("Queue", "queues", "orders", {"brokerRef": {"name": "b"}, "name": "tls.orders"})
    kit.wait_for(lambda: kit.ready(kube.get("queues", "orders")) == ("True", "Declared"), 20)
    params = pika.ConnectionParameters(
        host=env["broker"].host,
        port=env["broker"].amqps_port,
        credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(client_context(env["authority"].pem), "localhost"),
    )
    connection = pika.BlockingConnection(params)
    declared = connection.channel().queue_declare("tls.orders", passive=True)
    assert declared.method.queue == "tls.orders"
    connection.close()


def test_a_renewed_certificate_does_not_roll_the_pod(env: Any, kit: Any) -> None:
    """Issue 31: the broker reloads the files the kubelet refreshes; the template stays."""
    kube, ns = env["kube"], env["kube"].namespace
    path = f"/apis/apps/v1/namespaces/{ns}/statefulsets/b-server"

    def statefulset() -> dict[str, Any]:
        return dict(kube.plane.api("GET", path)[1])

    kit.wait_for(lambda: statefulset().get("metadata", {}).get("generation"), 30, "StatefulSet")
    before = statefulset()
    renewed = env["authority"].issue("hutch-broker", hosts=HOSTS)  # same CA, new key
    replace_secret_data(kube, "b-tls", renewed.secret_data())
    time.sleep(3 * float(os.environ["HUTCH_BROKER_STATUS_PERIOD"]) + 1)  # three timer rounds
    after = statefulset()
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]
    assert "hutch.dev/tls-hash" not in after["spec"]["template"]["metadata"]["annotations"]
    assert kube.get("brokers", "b")["status"]  # the timer ran and reported


def test_a_wrong_ca_is_tls_verification_failed_naming_the_ca(env: Any, kit: Any) -> None:
    kube, ns = env["kube"], env["kube"].namespace
    tls_secret(kube, "w-tls", env["leaf"], with_ca=False)
    stranger = certs.Authority("Not the issuer")
    kube.secret("w-ca", {"ca.crt": stranger.pem.decode()})
    make_broker(env, kit, "w", {"secretName": "w-tls", "caSecretName": "w-ca"})

    def available() -> dict[str, Any]:
        return condition(kube.get("brokers", "w"), "Available")

    kit.wait_for(lambda: available().get("reason") == "TLSVerificationFailed", 30, "TLS reason")
    message = available()["message"]
    assert available()["status"] == "False"
    # The broker sends its CA in the chain (ssl_options.cacertfile), which w-ca does not trust.
    assert message == (
        f"{env['broker'].https_url}: certificate verify failed: self-signed certificate in "
        f"certificate chain; trusted CA: Secret {ns}/w-ca key ca.crt"
    )
    kube.wait_reason("w", "TLSVerificationFailed")
    # Objects on it say why the Broker is not usable.
    kube.create("Queue", "queues", "stuck", {"brokerRef": {"name": "w"}})
    kit.wait_for(lambda: kit.ready(kube.get("queues", "stuck"))[1] == "BrokerNotReady", 20)
    stuck = condition(kube.get("queues", "stuck"), "Ready")["message"]
    assert stuck == f"Broker {ns}/w is not Available (TLSVerificationFailed)"

    # The same wrong CA in a connection Secret: the object's own Ready says it.
    kube.secret(
        "external",
        {"uri": env["broker"].https_url, "username": "guest", "password": "guest",
         "ca.crt": stranger.pem.decode()},
    )  # fmt: skip
    kube.create("Queue", "queues", "ext", {"connectionSecret": {"name": "external"}})
    kit.wait_for(lambda: kit.ready(kube.get("queues", "ext"))[1] == "TLSVerificationFailed", 20)
    assert "trusted CA: Secret" in condition(kube.get("queues", "ext"), "Ready")["message"]

    # Trusting the right CA makes the Broker Available, with no other change.
    replace_secret_data(kube, "w-ca", {"ca.crt": base64.b64encode(env["authority"].pem).decode()})
    kit.wait_for(lambda: available().get("status") == "True", 20, "Available with the right CA")


def test_a_missing_tls_secret_changes_nothing_and_says_so(env: Any, kit: Any) -> None:
    kube, ns = env["kube"], env["kube"].namespace
    make_broker(env, kit, "m", {"secretName": "not-issued-yet"})
    kit.wait_for(
        lambda: (
            condition(kube.get("brokers", "m"), "ReconcileSuccess").get("reason")
            == "TLSSecretInvalid"
        ),
        20,
        "TLSSecretInvalid",
    )
    message = condition(kube.get("brokers", "m"), "ReconcileSuccess")["message"]
    assert message == f"Secret {ns}/not-issued-yet (spec.tls) not found"
    path = f"/apis/apps/v1/namespaces/{ns}/statefulsets/m-server"
    assert kube.plane.api("GET", path)[0] == 404


def test_an_external_rabbitmq_over_tls_through_a_connection_secret(
    env: Any, kit: Any, request: Any, tmp_path: Any
) -> None:
    """RabbitMQ 3.10.8 serving HTTPS with the same certificate: verified with the Secret's ca.crt."""
    request.getfixturevalue("rabbitmq")  # skips (or fails in CI) where 3.10.8 is missing
    node = TLSRabbitMQ(leaf=env["leaf"], work_dir=tmp_path / "rabbitmq").start()
    kube = env["kube"]
    try:
        kube.secret(
            "rabbitmq-tls",
            {"uri": node.https_url, "username": "guest", "password": "guest",
             "ca.crt": env["authority"].pem.decode()},
        )  # fmt: skip
        spec = {"connectionSecret": {"name": "rabbitmq-tls"}, "name": "tls.external"}
        kube.create("Queue", "queues", "external", spec)
        kit.wait_for(lambda: kit.ready(kube.get("queues", "external")) == ("True", "Declared"), 30)
        params = pika.ConnectionParameters(
            host=node.host,
            port=node.amqps_port,
            credentials=pika.PlainCredentials("guest", "guest"),
            ssl_options=pika.SSLOptions(client_context(env["authority"].pem), "localhost"),
        )
        connection = pika.BlockingConnection(params)
        declared = connection.channel().queue_declare("tls.external", passive=True)
        assert declared.method.queue == "tls.external"
        connection.close()
    finally:
        node.stop()


def test_adding_tls_moves_the_default_user_secret_to_tls_addresses(env: Any, kit: Any) -> None:
    kube, ns = env["kube"], env["kube"].namespace
    tls_secret(kube, "late-tls", env["leaf"])
    kube.create("Broker", "brokers", "late", {"persistence": {"size": "0"}})

    def secret() -> dict[str, str]:
        found = kube.get_secret("late-default-user") or {}
        return {k: base64.b64decode(v).decode() for k, v in (found.get("data") or {}).items()}

    before = kit.wait_for(secret, 20, "the operator's default-user Secret")
    assert before["uri"] == f"http://late.{ns}.svc:15672"
    kube.patch_spec("brokers", "late", {"tls": {"secretName": "late-tls"}})
    after = kit.wait_for(
        lambda: secret() if secret()["uri"].startswith("https") else None, 20, "TLS uri"
    )
    assert after["uri"] == f"https://late.{ns}.svc:15671"
    assert after["amqp-uri"] == f"amqps://hutch:{before['password']}@late.{ns}.svc:5671/%2F"
    assert after["password"] == before["password"]


def test_https_to_a_plain_listener_is_tls_handshake_failed(env: Any, kit: Any) -> None:
    kube, broker = env["kube"], env["broker"]
    plain_as_https = f"https://{broker.host}:{broker.http_port}"
    kube.secret("no-tls", {"uri": plain_as_https, "username": "guest", "password": "guest"})
    kube.create("Queue", "queues", "mistaken", {"connectionSecret": {"name": "no-tls"}})
    kit.wait_for(lambda: kit.ready(kube.get("queues", "mistaken"))[1] == "TLSHandshakeFailed", 20)
    message = condition(kube.get("queues", "mistaken"), "Ready")["message"]
    assert message.startswith(f"{plain_as_https}: TLS handshake failed: ")
