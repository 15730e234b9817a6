"""Issue 16, TLS side by side: RabbitMQ 3.10.8 and hutch-broker given the same rabbitmq.conf lines.

``listeners.ssl.default``, ``management.ssl.port`` and ``ssl_options.*`` are RabbitMQ's keys;
both brokers get them verbatim (``tlsbrokers.tls_lines``) with one certificate made here, and
the same clients must see the same listeners, the same refusals.
"""

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pika
import pytest
from hutch_demo import certs, probes
from hutch_testing.tlsbrokers import TLSHutchBroker, TLSRabbitMQ, client_context

pytestmark = [pytest.mark.timeout(120), pytest.mark.broker]  # level broker: TLS brokers of its own


@pytest.fixture(scope="module")
def authority() -> certs.Authority:
    return certs.Authority()


@pytest.fixture(scope="module", params=["rabbitmq", "hutch"])
def broker(request: Any, authority: certs.Authority, tmp_path_factory: Any) -> Iterator[Any]:
    leaf = authority.issue("broker", hosts=("localhost", "127.0.0.1"))
    work = tmp_path_factory.mktemp(request.param)
    launcher = TLSRabbitMQ if request.param == "rabbitmq" else TLSHutchBroker
    if request.param == "rabbitmq":
        request.getfixturevalue("rabbitmq")  # skips, with the reason, where 3.10.8 is missing
    node = launcher(leaf=leaf, work_dir=work).start()
    yield node
    node.stop()


def amqps(node: Any, ca_pem: bytes, name: str = "amqps") -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        client_properties={"connection_name": name},
        host=node.host,
        port=node.amqps_port,
        credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(client_context(ca_pem), server_hostname="localhost"),
        connection_attempts=1,
    )
    return pika.BlockingConnection(params)


async def overview(node: Any, ca_pem: bytes) -> dict[str, Any]:
    headers = {"Authorization": probes.basic_auth("guest", "guest")}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.get(f"{node.https_url}/api/overview", ssl=client_context(ca_pem)) as response,
    ):
        assert response.status == 200
        return dict(await response.json())


async def test_the_same_tls_lines_serve_amqps_and_https(broker: Any, authority: Any) -> None:
    connection = amqps(broker, authority.pem)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("tls.side", auto_delete=True)
    channel.basic_publish("", "tls.side", b"x")
    assert channel.basic_get("tls.side", auto_ack=True)[2] == b"x"
    connection.close()
    listeners = {
        (item["protocol"], item["port"])
        for item in (await overview(broker, authority.pem))["listeners"]
    }
    assert {("amqp/ssl", broker.amqps_port), ("https", broker.https_port)} <= listeners


async def test_a_client_trusting_another_ca_is_refused(broker: Any) -> None:
    stranger = certs.Authority("Another CA").pem
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        amqps(broker, stranger)
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await overview(broker, stranger)


STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
TLS_KEYS = (
    "ssl", "ssl_protocol", "ssl_key_exchange", "ssl_cipher", "ssl_hash",
    "peer_cert_subject", "peer_cert_issuer", "peer_cert_validity",
)  # fmt: skip


@pytest.fixture(scope="module", params=["rabbitmq", "hutch"])
def asking_broker(request: Any, authority: certs.Authority, tmp_path_factory: Any) -> Iterator[Any]:
    """Asks AMQPS clients for a certificate (verify_peer) and takes them without one too."""
    leaf = authority.issue("broker", hosts=("localhost", "127.0.0.1"))
    work = tmp_path_factory.mktemp(f"asking-{request.param}")
    if request.param == "rabbitmq":
        request.getfixturevalue("rabbitmq")
    launcher = TLSRabbitMQ if request.param == "rabbitmq" else TLSHutchBroker
    lines = ("ssl_options.verify = verify_peer", "ssl_options.fail_if_no_peer_cert = false")
    node = launcher(leaf=leaf, work_dir=work, config_lines=lines).start()
    yield node
    node.stop()


async def connections(node: Any, ca_pem: bytes) -> list[dict[str, Any]]:
    headers = {"Authorization": probes.basic_auth("guest", "guest")}
    url = f"{node.https_url}/api/connections"
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.get(url, ssl=client_context(ca_pem)) as response,
    ):
        assert response.status == 200
        return list(await response.json())


async def test_api_connections_reports_what_each_tls_client_negotiated(
    asking_broker: Any, authority: certs.Authority
) -> None:
    """A client with a certificate and one without, over AMQPS; a third over plain AMQP."""
    app = authority.issue("billing-app", client=True)
    params = pika.ConnectionParameters(
        host=asking_broker.host, port=asking_broker.amqps_port,
        credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(client_context(authority.pem, client=app), "localhost"),
        connection_attempts=1, client_properties={"connection_name": "with-cert"},
    )  # fmt: skip
    with_cert = pika.BlockingConnection(params)
    without = amqps(asking_broker, authority.pem, name="without")
    plain = pika.BlockingConnection(
        pika.ConnectionParameters(
            host=asking_broker.host, port=asking_broker.amqp_port,
            credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1,
            client_properties={"connection_name": "plain"},
        )
    )  # fmt: skip
    try:
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30  # RabbitMQ lists a connection once its stats arrive
        while len(found) < 3 and time.monotonic() < deadline:
            found = await connections(asking_broker, authority.pem)
            await asyncio.sleep(0.5)
        assert len(found) == 3, found
    finally:
        for connection in (with_cert, without, plain):
            connection.close()
    named = {item["client_properties"].get("connection_name"): item for item in found}
    items = [named["with-cert"], named["without"], named["plain"]]
    assert [item["port"] for item in items] == [asking_broker.amqps_port] * 2 + [
        asking_broker.amqp_port
    ]
    cert, anonymous, tcp = ({key: item[key] for key in TLS_KEYS} for item in items)
    assert cert["ssl"] is anonymous["ssl"] is True
    assert cert["ssl_protocol"] == "tlsv1.3"
    assert (cert["ssl_key_exchange"], cert["ssl_hash"]) == ("any", "aead")
    assert cert["peer_cert_subject"] == "CN=billing-app"
    assert cert["peer_cert_issuer"] == "CN=Hutch test CA"
    assert re.fullmatch(f"{STAMP} - {STAMP}", cert["peer_cert_validity"]), cert
    assert cert["ssl_cipher"] == anonymous["ssl_cipher"] == "aes_256_gcm"
    assert anonymous["peer_cert_subject"] is anonymous["peer_cert_validity"] is None
    assert tcp == {"ssl": False, **dict.fromkeys(TLS_KEYS[1:])}
