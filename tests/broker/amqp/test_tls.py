"""Issue 16, TLS: AMQPS and HTTPS from the certificate the config names, with real clients.

Certificates are made per test (``hutch_demo.certs``); pika and aiohttp verify them against
the test's CA, so a handshake that succeeds proves the broker served that very certificate.
"""

import ssl
from pathlib import Path

import aiohttp
import pika
import pytest
from hutch_broker import __main__ as entry
from hutch_demo import certs, probes
from hutch_testing.tlsbrokers import TLSHutchBroker, client_context
from pika.exceptions import AMQPConnectionError

pytestmark = pytest.mark.timeout(60)

HOSTS = ("localhost", "127.0.0.1")


@pytest.fixture(scope="module")
def authority() -> certs.Authority:
    return certs.Authority()


@pytest.fixture(scope="module")
def server_leaf(authority: certs.Authority) -> certs.Leaf:
    return authority.issue("hutch-broker", hosts=HOSTS)


def amqps(broker: TLSHutchBroker, context: ssl.SSLContext) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        host=broker.host,
        port=broker.amqps_port,
        credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(context, server_hostname="localhost"),
        connection_attempts=1,
        socket_timeout=5,
    )
    return pika.BlockingConnection(params)


async def https_get(broker: TLSHutchBroker, path: str, context: ssl.SSLContext) -> tuple[int, dict]:
    headers = {"Authorization": probes.basic_auth("guest", "guest")}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.get(f"{broker.https_url}{path}", ssl=context) as response,
    ):
        return response.status, await response.json()


@pytest.mark.broker  # starts processes (hutch_testing.levels)
async def test_amqps_and_https_serve_the_configured_certificate(server_leaf, authority):
    with TLSHutchBroker(leaf=server_leaf) as broker:
        connection = amqps(broker, client_context(authority.pem))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("tls.q")
        channel.basic_publish("", "tls.q", b"over TLS")
        _, _, body = channel.basic_get("tls.q", auto_ack=True)
        assert body == b"over TLS"
        status, overview = await https_get(broker, "/api/overview", client_context(authority.pem))
        assert status == 200
        listeners = {(item["protocol"], item["port"]) for item in overview["listeners"]}
        assert listeners == {
            ("amqp", broker.amqp_port),
            ("amqp/ssl", broker.amqps_port),
            ("http", broker.http_port),
            ("https", broker.https_port),
        }
        connection.close()
        # The TLS port speaks only TLS: a plain AMQP header gets no Connection.Start.
        assert not probes.amqp_answers(broker.host, broker.amqps_port)


@pytest.mark.broker  # starts processes (hutch_testing.levels)
async def test_a_client_trusting_another_ca_is_refused(server_leaf):
    stranger = client_context(certs.Authority("Some other CA").pem)
    with TLSHutchBroker(leaf=server_leaf) as broker:
        with pytest.raises(ssl.SSLCertVerificationError, match="self-signed certificate in"):
            amqps(broker, stranger)
        with pytest.raises(aiohttp.ClientConnectorCertificateError) as https_info:
            await https_get(broker, "/api/overview", stranger)
        assert "certificate verify failed" in str(https_info.value)


@pytest.mark.broker  # starts processes (hutch_testing.levels)
async def test_plain_listeners_off_leaves_only_tls(server_leaf, authority):
    with TLSHutchBroker(leaf=server_leaf, plain=False) as broker:
        assert not probes.amqp_answers(broker.host, broker.amqp_port)
        with pytest.raises(ConnectionRefusedError):
            probes.http_get(broker.host, broker.http_port, "/", username="guest", password="x")
        connection = amqps(broker, client_context(authority.pem))
        assert connection.channel().queue_declare("only.tls").method.queue == "only.tls"
        connection.close()
        status, overview = await https_get(broker, "/api/overview", client_context(authority.pem))
        assert status == 200
        assert {item["protocol"] for item in overview["listeners"]} == {"amqp/ssl", "https"}


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_mutual_tls_requires_a_client_certificate_from_the_ca(server_leaf, authority):
    mutual = ("ssl_options.verify = verify_peer", "ssl_options.fail_if_no_peer_cert = true")
    app = authority.issue("app", client=True)
    foreign = certs.Authority("Foreign CA").issue("intruder", client=True)
    with TLSHutchBroker(leaf=server_leaf, config_lines=mutual) as broker:
        with pytest.raises(AMQPConnectionError):
            amqps(broker, client_context(authority.pem)).channel()
        with pytest.raises(AMQPConnectionError):
            amqps(broker, client_context(authority.pem, client=foreign)).channel()
        connection = amqps(broker, client_context(authority.pem, client=app))
        assert connection.channel().queue_declare("mtls.q").method.queue == "mtls.q"
        connection.close()


@pytest.mark.broker  # starts processes (hutch_testing.levels)
async def test_https_with_verify_peer_requires_a_client_certificate(server_leaf, authority):
    mutual = ("management.ssl.verify = verify_peer", "management.ssl.fail_if_no_peer_cert = true")
    app = authority.issue("monitoring", client=True)
    with TLSHutchBroker(leaf=server_leaf, config_lines=mutual) as broker:
        with pytest.raises(aiohttp.ClientError):
            await https_get(broker, "/api/overview", client_context(authority.pem))
        status, _ = await https_get(
            broker, "/api/overview", client_context(authority.pem, client=app)
        )
        assert status == 200
        # AMQPS was not asked for client certificates.
        amqps(broker, client_context(authority.pem)).close()


def start(tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str]) -> tuple[int, str]:
    config = tmp_path / "broker.conf"
    config.write_text("\n".join(lines) + "\n")
    # No port flags (they would beat "listeners.tcp = none"); nothing binds before the refusal.
    argv = ["--log-level", "CRITICAL"]
    code = entry.main([*argv, "--data-dir", str(tmp_path / "data"), "--config", str(config)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert not (tmp_path / "data").exists()  # refused before anything was written
    return code, captured.err


def test_a_missing_certificate_file_refuses_the_start(tmp_path, capsys):
    missing = tmp_path / "nowhere.crt"
    lines = ["listeners.ssl.default = 0", f"ssl_options.certfile = {missing}"]
    code, err = start(tmp_path, capsys, [*lines, f"ssl_options.keyfile = {missing}"])
    assert (code, err) == (1, f"hutch-broker: ssl_options.certfile {missing}: no such file\n")


def test_a_key_that_is_not_the_certificates_refuses_the_start(tmp_path, capsys, server_leaf):
    cert, _, _ = server_leaf.write(tmp_path / "a", "server")
    _, other_key, _ = certs.Authority().issue("other", hosts=HOSTS).write(tmp_path / "b", "x")
    lines = [
        "management.ssl.port = 0",
        f"management.ssl.certfile = {cert}",
        f"management.ssl.keyfile = {other_key}",
    ]
    code, err = start(tmp_path, capsys, lines)
    assert code == 1
    assert err == (
        f"hutch-broker: management.ssl.keyfile {other_key} is not the key of "
        f"management.ssl.certfile {cert}\n"
    )


def test_tls_only_without_a_tls_listener_refuses_the_start(tmp_path, capsys):
    code, err = start(tmp_path, capsys, ["listeners.tcp = none"])
    assert (code, err) == (
        1,
        "hutch-broker: listeners.tcp = none leaves no AMQP listener: set listeners.ssl\n",
    )


def test_verify_peer_without_a_ca_bundle_refuses_the_start(tmp_path, capsys, server_leaf):
    cert, key, _ = server_leaf.write(tmp_path / "a", "server")
    lines = [
        "listeners.ssl.default = 0",
        f"ssl_options.certfile = {cert}",
        f"ssl_options.keyfile = {key}",
        "ssl_options.verify = verify_peer",
    ]
    code, err = start(tmp_path, capsys, lines)
    assert (code, err) == (
        1,
        "hutch-broker: ssl_options.verify = verify_peer needs ssl_options.cacertfile\n",
    )
