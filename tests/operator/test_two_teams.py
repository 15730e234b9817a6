"""examples/two-teams.yaml, applied as it is to a real kube-apiserver and a real hutch-broker.

Two namespaces share one Broker; each team's credentials Secret logs in to its own vhost with
pika, cannot open the other team's vhost, and the other team's objects cannot reach into it
(a Vhost owns its vhost for its namespace). The namespaces have fixed names (the example's),
which is fine on the session's private apiserver.

The Broker has ``spec.tls``: the test plays cert-manager (the ``hutch-tls`` Secret, from a CA
made here), the operator reaches the stand-in hutch-broker over verified HTTPS, and the teams'
``amqp-uri`` are ``amqps://`` URIs that pika opens trusting that CA. The apiserver tier runs no
pods, so the stand-in is a host process that also keeps its plain ports for the management
checks below; only the operator's and the teams' connections are asserted to be TLS.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
import yaml
from hutch_demo import certs, management
from hutch_testing.tlsbrokers import TLSHutchBroker, client_context

pytestmark = pytest.mark.timeout(180)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-teams.yaml"


@pytest.fixture(scope="module")
def teams(operator: Any, crds_applied: Any, kit: Any, tmp_path_factory: Any) -> Iterator[Any]:
    plane = crds_applied
    authority = certs.Authority()
    leaf = authority.issue("hutch.messaging.svc", hosts=("hutch.messaging.svc", "127.0.0.1"))
    broker = TLSHutchBroker(leaf=leaf, work_dir=tmp_path_factory.mktemp("hutch")).start()
    amqps = f"amqps://{broker.host}:{broker.amqps_port}"
    entries = [e for e in os.environ.get("HUTCH_BROKER_ADDRESSES", "").split(",") if e]
    os.environ["HUTCH_BROKER_ADDRESSES"] = ",".join(
        [*entries, f"messaging/hutch={broker.https_url}|{amqps}"]
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "messaging"}}
    plane.api("POST", "/api/v1/namespaces", namespace)
    kit.Kube(plane, "messaging").secret("hutch-default-user",
                                        {"username": "guest", "password": "guest"})  # fmt: skip
    tls = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
           "metadata": {"name": "hutch-tls"}, "data": leaf.secret_data()}  # fmt: skip
    assert plane.api("POST", "/api/v1/namespaces/messaging/secrets", tls)[0] == 201
    plane.kubectl("apply", "-f", str(EXAMPLE))
    objects = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    try:
        yield {"plane": plane, "broker": broker, "objects": objects, "ca": authority.pem}
    finally:
        broker.stop()


def _ready(kit: Any, plane: Any, doc: dict[str, Any]) -> Any:
    kube = kit.Kube(plane, doc["metadata"]["namespace"])
    plural = doc["kind"].lower() + "s"
    condition = "Available" if doc["kind"] == "Broker" else "Ready"
    return kit.ready(kube.get(plural, doc["metadata"]["name"]), condition)[0] == "True"


def _uri(kit: Any, plane: Any, namespace: str, user: str) -> str:
    secret = kit.Kube(plane, namespace).get_secret(f"{user}-user-credentials")
    return base64.b64decode(secret["data"]["amqp-uri"]).decode()


def _connect(uri: str, ca_pem: bytes) -> pika.BlockingConnection:
    params = pika.URLParameters(uri)
    assert params.ssl_options is not None, uri  # amqps://: the Broker has spec.tls
    params.ssl_options = pika.SSLOptions(client_context(ca_pem), server_hostname=params.host)
    params.connection_attempts = 1
    return pika.BlockingConnection(params)


def test_two_teams_share_a_broker_and_not_their_vhosts(teams: dict[str, Any], kit: Any) -> None:
    plane = teams["plane"]
    hutch = [d for d in teams["objects"] if d["apiVersion"].startswith("hutch.dev/")]
    for doc in hutch:
        kit.wait_for(lambda doc=doc: _ready(kit, plane, doc), 60, f"{doc['kind']} ready")
    orders = _uri(kit, plane, "team-a", "orders-app")
    billing = _uri(kit, plane, "team-b", "billing-app")
    # Each team works in its own vhost with its own user.
    channel = _connect(orders, teams["ca"]).channel()
    channel.confirm_delivery()
    channel.basic_publish("", "orders", b"order-1")
    assert channel.basic_get("orders", auto_ack=True)[2] == b"order-1"
    channel = _connect(billing, teams["ca"]).channel()
    channel.confirm_delivery()
    channel.basic_publish("invoices", "invoice.paid", b"1")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.basic_publish("invoices", "refund.paid", b"1")  # its TopicPermission
    assert refused.value.reply_code == 403
    # team-b's user cannot open team-a's vhost.
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _connect(billing.rsplit("/", 1)[0] + "/team-a", teams["ca"])
    # team-b's objects cannot reach into team-a's vhost either.
    team_b = kit.Kube(plane, "team-b")
    ref = {"brokerRef": {"name": "hutch", "namespace": "messaging"}, "vhost": "team-a"}
    team_b.create("Queue", "queues", "snoop", {**ref, "name": "orders-copy"})
    team_b.create("Permission", "permissions", "grab",
                  {**ref, "user": "billing-app", "configure": ".*", "write": ".*",
                   "read": ".*"})  # fmt: skip
    team_b.create("Queue", "queues", "squat", {**ref, "vhost": "/"})  # the platform's vhost
    for plural, name in (("queues", "snoop"), ("permissions", "grab"), ("queues", "squat")):
        kit.wait_for(
            lambda p=plural, n=name: kit.ready(team_b.get(p, n)) == ("False", "NamespaceNotAllowed"),
            30, f"{plural}/{name} NamespaceNotAllowed",
        )  # fmt: skip
    # Nor can it make itself a broker administrator (which could grant itself anything).
    team_b.create("User", "users", "root", {"brokerRef": ref["brokerRef"],
                                            "tags": ["administrator"]})  # fmt: skip
    kit.wait_for(
        lambda: kit.ready(team_b.get("users", "root")) == ("False", "NamespaceNotAllowed"),
        30, "users/root NamespaceNotAllowed",
    )  # fmt: skip
    api = management.Management(teams["broker"])
    assert api.get("/users/root").status == 404
    assert api.get("/queues/team-a/orders-copy").status == 404
    assert api.get("/queues/%2F/squat").status == 404
    assert api.get("/permissions/team-a/billing-app").status == 404
    message = team_b.get("permissions", "grab")["status"]["conditions"][0]["message"]
    assert "managed by Vhost team-a/team-a" in message
