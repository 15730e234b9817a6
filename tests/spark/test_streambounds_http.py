"""The stream source's kept management connection (streamhttp.Session) on the wire.

Before, every plan opened a connection of its own (`urllib.request.urlopen`): a query's N
plans were N connections. Now a reader keeps one: N plans make N requests over 1 connection,
counted on hutch-broker through a relay that counts both; a connection the server closed
between two plans (the relay drops it, as a server does an idle one) is reopened once and the
plan succeeds; a failure on a new connection, or on the one reopened, is the error it always
was. The error answers (401, 403, 404, any other status) keep their messages and the
connection, from a scripted server; over https the CA file is used as before.

Before, the kept connection went straight to the broker whatever the environment said, where
`urlopen` had used its proxy: now `HTTP_PROXY` sends the plans through a real proxy on loopback
(in absolute form, with the credentials of the proxy's URL), `HTTPS_PROXY` through its
`CONNECT` tunnel (TLS still checked against the broker's CA and name), and `NO_PROXY` covering
the host keeps them off it.
"""

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pika
import pytest
from hutch_demo import certs
from hutch_spark import streambounds, streamoptions
from hutch_spark.errors import HutchConnectionError
from hutch_spark.streamhttp import Session
from hutch_spark.streamplan import Bounds
from hutch_testing.proxy import RecordingProxy
from hutch_testing.relay import CountingRelay
from hutch_testing.tlsbrokers import TLSHutchBroker

pytestmark = [pytest.mark.broker, pytest.mark.shared_broker]

STREAM = {"x-queue-type": "stream"}


def settings(uri: str, management: str, streams: str, **more: str) -> Any:
    return streamoptions.parse_stream_options(
        {"streams": streams, "uri": uri, "managementUri": management, **more}
    )


def fetch_over_one_session(planned: Any, times: int, expected: dict[str, Bounds]) -> None:
    """Plans `times` times over one kept Session, each plan giving `expected`, then closes it."""
    session = Session(planned)
    try:
        for _ in range(times):
            assert streambounds.fetch(planned, session=session) == expected
    finally:
        session.close()


@pytest.fixture
def streams(hutch_broker: Any) -> Any:
    connection = pika.BlockingConnection(pika.URLParameters(hutch_broker.amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()  # published means enqueued: the plans read the offsets
    for n in range(3):
        channel.queue_declare(f"s-{n}", durable=True, arguments=STREAM)
        for _ in range(n):
            channel.basic_publish("", f"s-{n}", b"x")
    connection.close()
    return hutch_broker


@pytest.mark.parametrize("names", ["s-0,s-1,s-2", "s-2"])
def test_a_readers_plans_share_one_connection(streams: Any, names: str) -> None:
    expected = {name: Bounds(0, int(name[-1])) for name in names.split(",")}
    with CountingRelay("127.0.0.1", urlsplit(streams.http_url).port) as relay:
        planned = settings(streams.amqp_url, f"http://127.0.0.1:{relay.port}", names)
        fetch_over_one_session(planned, 5, expected)
        assert (relay.requests, relay.accepted) == (5, 1)


def test_a_connection_the_server_closed_is_reopened_once(streams: Any) -> None:
    with CountingRelay("127.0.0.1", urlsplit(streams.http_url).port) as relay:
        planned = settings(streams.amqp_url, f"http://127.0.0.1:{relay.port}", "s-0,s-2")
        session = Session(planned)
        try:
            expected = {"s-0": Bounds(0, 0), "s-2": Bounds(0, 2)}
            assert streambounds.fetch(planned, session=session) == expected
            relay.drop()  # as a server closes an idle kept connection
            assert streambounds.fetch(planned, session=session) == expected
            assert relay.accepted == 2
            assert streambounds.fetch(planned, session=session) == expected
            assert relay.accepted == 2  # the new one is kept in turn
        finally:
            session.close()


class Scripted(ThreadingHTTPServer):
    """Answers each request with the next of `replies`: (status, body, close after), or None to
    close the connection without an answer. Counts connections and requests."""

    daemon_threads = True

    def __init__(self, replies: list[tuple[int, Any, bool] | None]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies = replies
        self.connections = self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Scripted

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_GET(self) -> None:
        self.server.requests += 1
        reply = self.server.replies.pop(0)
        if reply is None:
            self.close_connection = True
            return
        status, body, close = reply
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = close

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[Any]:
    servers: list[Scripted] = []

    def start(replies: list[tuple[int, Any, bool] | None]) -> Scripted:
        server = Scripted(replies)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


STREAM_ITEM = {"name": "s", "type": "stream", "first_offset": 0, "next_offset": 7}


def one(server: Scripted) -> tuple[Any, Session]:
    planned = settings("amqp://u:p@h/v1", server.url, "s")
    return planned, Session(planned)


def test_only_a_kept_connection_is_retried_and_only_once(scripted: Any) -> None:
    closing = scripted([(200, STREAM_ITEM, True), (200, STREAM_ITEM, False)])
    planned, session = one(closing)
    for _ in range(2):  # the server closes the first connection after its answer
        assert streambounds.fetch(planned, session=session) == {"s": Bounds(0, 7)}
    assert (closing.connections, closing.requests) == (2, 2)
    session.close()

    unanswered = scripted([None])
    planned, session = one(unanswered)
    with pytest.raises(HutchConnectionError, match="cannot read stream 's' from the management"):
        streambounds.fetch(planned, session=session)  # a new connection: not retried
    assert (unanswered.connections, unanswered.requests) == (1, 1)

    twice = scripted([(200, STREAM_ITEM, True), None, (200, STREAM_ITEM, False)])
    planned, session = one(twice)
    streambounds.fetch(planned, session=session)
    with pytest.raises(HutchConnectionError, match="cannot read stream 's' from the management"):
        streambounds.fetch(planned, session=session)  # closed, reopened, closed again
    assert (twice.connections, twice.requests) == (2, 2)
    assert streambounds.fetch(planned, session=session) == {"s": Bounds(0, 7)}  # a third, new


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (404, "hutch: stream 's' does not exist in vhost 'v1' (management API at {url})"),
        (
            401,
            "hutch: the management API at {url} refused user 'u' (401): reading stream bounds "
            "needs a user with a management tag (monitoring, or management with access to "
            "vhost 'v1')",
        ),
        (403, "hutch: the management API at {url} refused user 'u' (403)"),
        (
            500,
            "hutch: the management API at {url} answered 500 Internal Server Error for stream 's'",
        ),
    ],
)
def test_error_answers_keep_their_messages_and_the_connection(
    scripted: Any, status: int, said: str
) -> None:
    server = scripted([(status, {"error": "x"}, False), (200, STREAM_ITEM, False)])
    planned, session = one(server)
    with pytest.raises(HutchConnectionError) as raised:
        streambounds.fetch(planned, session=session)
    assert said.format(url=server.url) in str(raised.value)
    assert streambounds.fetch(planned, session=session) == {"s": Bounds(0, 7)}
    assert (server.connections, server.requests) == (1, 2)
    session.close()


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: Any) -> Iterator[tuple[TLSHutchBroker, Path, Path]]:
    authority = certs.Authority()
    leaf = authority.issue("hutch-broker", hosts=("localhost", "127.0.0.1"))
    work = tmp_path_factory.mktemp("management-tls")
    (work / "ca.crt").write_bytes(authority.pem)
    (work / "stranger.crt").write_bytes(certs.Authority().pem)
    broker = TLSHutchBroker(leaf=leaf, work_dir=work / "broker").start()
    try:
        yield broker, work / "ca.crt", work / "stranger.crt"
    finally:
        broker.stop()


def tls_stream(broker: TLSHutchBroker, name: str) -> str:
    """Declares the empty stream `name` on the TLS broker; the amqps URI its plans are given."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.amqp_url))
    connection.channel().queue_declare(name, durable=True, arguments=STREAM)
    connection.close()
    return f"amqps://guest:guest@localhost:{broker.amqps_port}/%2F"


def test_https_plans_share_one_connection_with_the_ca_file(tls_broker: Any) -> None:
    broker, ca_file, stranger = tls_broker
    uri = tls_stream(broker, "tls-s")
    with CountingRelay("localhost", broker.https_port) as relay:
        management = f"https://localhost:{relay.port}"
        planned = settings(uri, management, "tls-s", caFile=str(ca_file))
        fetch_over_one_session(planned, 3, {"tls-s": Bounds(0, 0)})
        assert relay.accepted == 1
        refused = settings(uri, management, "tls-s", caFile=str(stranger))
        with pytest.raises(HutchConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            streambounds.fetch(refused)


PROXY_VARIABLES = ("http", "https", "no", "all")


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The test's monkeypatch, with no proxy variable of the machine's left (both cases)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(f"{name}_proxy", raising=False)
        monkeypatch.delenv(f"{name.upper()}_PROXY", raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)  # urllib ignores HTTP_PROXY under CGI
    return monkeypatch


def test_plans_go_through_the_environments_http_proxy_unless_no_proxy(
    streams: Any, environment: pytest.MonkeyPatch
) -> None:
    port = urlsplit(streams.http_url).port
    expected = {"s-0": Bounds(0, 0), "s-2": Bounds(0, 2)}
    with RecordingProxy() as proxy:
        environment.setenv("HTTP_PROXY", proxy.url.replace("//", "//job:p%40ss@"))
        planned = settings(streams.amqp_url, f"http://127.0.0.1:{port}", "s-0,s-2")
        fetch_over_one_session(planned, 3, expected)
        token = base64.b64encode(b"job:p@ss").decode()
        assert len(proxy.asked) == 3
        for line, authorization in proxy.asked:
            assert line.startswith(f"GET http://127.0.0.1:{port}/api/queues/"), line  # absolute
            assert authorization == f"Basic {token}"

        environment.setenv("NO_PROXY", "localhost,127.0.0.1")
        assert streambounds.fetch(planned) == expected
        assert len(proxy.asked) == 3  # the plan went straight to the broker


def test_https_plans_go_through_the_proxys_connect_tunnel(
    tls_broker: Any, environment: pytest.MonkeyPatch
) -> None:
    broker, ca_file, stranger = tls_broker
    uri = tls_stream(broker, "tls-p")
    management = f"https://localhost:{broker.https_port}"
    with RecordingProxy() as proxy:
        environment.setenv("HTTPS_PROXY", proxy.url)
        environment.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # for http only: never used here
        planned = settings(uri, management, "tls-p", caFile=str(ca_file))
        fetch_over_one_session(planned, 3, {"tls-p": Bounds(0, 0)})
        assert proxy.asked == [(f"CONNECT localhost:{broker.https_port} HTTP/1.0", None)]
        refused = settings(uri, management, "tls-p", caFile=str(stranger))
        said = r"through the proxy http://127\.0\.0\.1:\d+: .*CERTIFICATE_VERIFY_FAILED"
        with pytest.raises(HutchConnectionError, match=said):
            streambounds.fetch(refused)
        assert len(proxy.asked) == 2  # the broker's certificate, checked through the tunnel


def test_a_proxy_that_is_not_http_is_a_clear_error(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("HTTP_PROXY", "socks5://user:secret@proxy.example:1080")
    planned = settings("amqp://h/%2F", "http://broker.example:15672", "s")
    with pytest.raises(HutchConnectionError, match="is not an http:// proxy") as raised:
        streambounds.fetch(planned)
    assert "secret" not in str(raised.value)
