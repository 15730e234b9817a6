"""Issue 16, TLS side by side: RabbitMQ 3.10.8 and hutch-broker given the same rabbitmq.conf lines.

``listeners.ssl.default``, ``management.ssl.port`` and ``ssl_options.*`` are RabbitMQ's keys;
both brokers get them verbatim (``tlsbrokers.tls_lines``) with one certificate made here, and
the same clients must see the same listeners, the same refusals.
"""

from collections.abc import Iterator
from typing import Any

import aiohttp
import pika
import pytest
from hutch_testing import certs, probes
from hutch_testing.tlsbrokers import TLSHutchBroker, TLSRabbitMQ, client_context

pytestmark = pytest.mark.timeout(120)


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


def amqps(node: Any, ca_pem: bytes) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
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
