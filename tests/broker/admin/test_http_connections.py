"""Connections and channels lists, and HTTP publishes reaching waiting consumers."""

from types import SimpleNamespace

import pytest
from hutch_broker.dispatch.context import TLSInfo
from hutch_broker.dispatch.unacked import Unacked
from hutch_broker.model.queues import Consumer
from hutch_testing.targets import OneAtATime


class FakeChannel(OneAtATime):
    """Enough of dispatch's Channel for the views and for queue deliveries."""

    def __init__(self, session, number):
        self.session = session
        self.number = number
        self.consumers = {}
        self.unacked = Unacked()
        self.prefetch_count = 0
        self.consumer_prefetch = 10
        self.confirm_mode = True
        self.transactional = False
        self.flow_active = True
        self.delivered = []

    def has_capacity(self, consumer):
        return True

    def deliver(self, consumer, queue, entry):
        self.delivered.append(entry.message.body)

    def cancelled_by_broker(self, consumer):
        self.consumers.pop(consumer.tag, None)


def add_session(context, broker, *, user="guest", port=40000, local_address=None, tls=None):
    session = SimpleNamespace(
        peer_host="127.0.0.1",
        peer_port=port,
        user=broker.users[user],
        vhost=broker.vhosts["/"],
        channels={},
        connected_at_ms=1,
        blocked=False,
        proto=SimpleNamespace(
            client_properties={"product": b"pika", "capabilities": {}},
            channel_max=2047, frame_max=131072, heartbeat=60,
        ),
        local_address=local_address,
        tls=tls,
    )  # fmt: skip
    session.channels[1] = FakeChannel(session, 1)
    context.sessions[port] = session
    context.channel_count += 1
    return session


async def test_connections_and_channels(api, context, broker):
    add_session(context, broker)
    (connection,) = (await api.get("/api/connections")).body
    assert connection["name"] == "127.0.0.1:40000 -> 127.0.0.1:5672"
    assert (connection["user"], connection["vhost"], connection["channels"]) == ("guest", "/", 1)
    assert connection["client_properties"]["product"] == "pika"
    (channel,) = (await api.get("/api/channels")).body
    assert channel["name"] == "127.0.0.1:40000 -> 127.0.0.1:5672 (1)"
    assert (channel["prefetch_count"], channel["confirm"]) == (10, True)
    assert len((await api.get("/api/vhosts/%2F/connections")).body) == 1
    assert len((await api.get("/api/vhosts/%2F/channels")).body) == 1
    name = "127.0.0.1:40000%20-%3E%20127.0.0.1:5672"
    assert (await api.get(f"/api/connections/{name}")).body["peer_port"] == 40000
    overview = (await api.get("/api/overview")).body
    assert overview["object_totals"]["connections"] == 1
    assert overview["object_totals"]["channels"] == 1
    assert connection["ssl"] is False  # and every TLS key there, null, as on 3.10.8
    assert {key: connection[key] for key in TLS_KEYS if key != "ssl"} == dict.fromkeys(
        set(TLS_KEYS) - {"ssl"}
    )
    assert (connection["channel_max"], connection["frame_max"], connection["timeout"]) == (
        2047, 131072, 60,
    )  # fmt: skip


TLS_KEYS = (
    "ssl", "ssl_protocol", "ssl_key_exchange", "ssl_cipher", "ssl_hash",
    "peer_cert_subject", "peer_cert_issuer", "peer_cert_validity",
)  # fmt: skip


async def test_a_tls_connection_reports_its_listener_and_what_it_negotiated(api, context, broker):
    tls = TLSInfo("tlsv1.3", "any", "aes_256_gcm", "aead", "CN=app,O=team", "CN=Hutch CA", "v")
    add_session(context, broker, port=40001, local_address="10.0.0.5:5671", tls=tls)
    (connection,) = (await api.get("/api/connections")).body
    assert connection["name"] == "127.0.0.1:40001 -> 10.0.0.5:5671"
    assert (connection["host"], connection["port"]) == ("10.0.0.5", 5671)
    assert [connection[key] for key in TLS_KEYS] == [
        True, "tlsv1.3", "any", "aes_256_gcm", "aead", "CN=app,O=team", "CN=Hutch CA", "v",
    ]  # fmt: skip
    (channel,) = (await api.get("/api/channels")).body
    assert channel["name"] == "127.0.0.1:40001 -> 10.0.0.5:5671 (1)"


async def test_users_see_only_their_connections(api, context, broker, user_api):
    bob = user_api("bob", ["management"], vhosts=("/",))
    add_session(context, broker)
    add_session(context, broker, user="bob", port=40001)
    assert [c["user"] for c in (await bob.get("/api/connections")).body] == ["bob"]
    assert len((await api.get("/api/connections")).body) == 2


@pytest.mark.parametrize("ackmode", ["ack_requeue_true", "reject_requeue_true"])
async def test_http_publish_and_requeue_reach_waiting_consumers(api, context, broker, ackmode):
    await api.put("/api/queues/%2F/q", {})
    queue = broker.vhosts["/"].queues["q"]
    for payload in ("a", "b"):
        await api.post(
            "/api/exchanges/%2F/amq.default/publish",
            {
                "properties": {},
                "routing_key": "q",
                "payload": payload,
                "payload_encoding": "string",
            },
        )
    got = await api.post(
        "/api/queues/%2F/q/get", {"count": 2, "ackmode": ackmode, "encoding": "auto"}
    )
    assert [m["payload"] for m in got.body] == ["a", "b"]
    session = add_session(context, broker)
    channel = session.channels[1]
    queue.add_consumer(Consumer("c1", queue, channel, no_ack=True, exclusive=False, prefetch=0))
    await api.post(
        "/api/exchanges/%2F/amq.default/publish",
        {"properties": {}, "routing_key": "q", "payload": "c", "payload_encoding": "string"},
    )
    assert channel.delivered == [b"a", b"b", b"c"]
    detail = (await api.get("/api/queues/%2F/q")).body
    assert [c["consumer_tag"] for c in detail["consumer_details"]] == ["c1"]
