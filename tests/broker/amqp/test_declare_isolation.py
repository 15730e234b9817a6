"""A tenant's declares against expensive policies slow that tenant only (issue "Isolation and scale").

An administrator gives vhost ``declarer`` ten policies whose patterns have exponential DFAs
(about 18 ms per policy for a 255-character name of a's and b's, the lazy DFA's bounded cache
thrashing), and one cheap policy that is the one that applies.  The tenant ``declarer``, with
configure, write and read on its own vhost and nothing else, then declares queues with such
names in a loop, five pipelined in each write.  Before, each declare matched the name against
every policy inside the method, about 180 ms of loop time each, and a canary in another vhost
(a separate process publishing and consuming one message every 20 ms) waited for it.  Now the
search runs in slices against the loop turn's allowance and the declaring connection waits:
the canary stays under a loose bound meant for a busy shared machine, every declare-ok comes
back in order, and every queue has the cheap policy.
"""

import random
import socket
import struct
from types import SimpleNamespace

import pytest
from hutch_demo import management
from hutch_testing import cpuwait, inmemory, noisy
from pamqp import commands, frame

# 10 declares, and 2 names over HTTP: with the policy search in one piece (``PolicyMatch.advance``
# given no budget) the canary's own share was 2.3 s and 0.94 s against the 250 ms bound; the
# 20 declares and 4 names of before cost 50% more CPU for nothing more (2026-11-29, #29).
ROUNDS, PIPELINED = 2, 5
HTTP_NAMES = 2
# Per exchange, to one queue. With the deletes' slicing removed (``unlink_within`` given an
# unlimited meter), 30,000 held the loop for 1.6 s of its own time, six times the bound (20,000:
# 0.43 s, too close to it); 60,000 cost twice the setup for nothing more (2026-11-29, #29).
BINDINGS = 30_000
LOOSE = noisy.CanaryBound(max_ms=250.0, p99_ms=250.0)


def expensive_pattern(index: int) -> str:
    n = 240 - index
    return f"(a|b)*a(a|b){{{n}}}c|(a|b)*b(a|b){{{n}}}d|(a|b)*a(a|b){{{n - 10}}}e|(a|b)*b(a|b){{{n - 10}}}f"


class RawClient:
    """An AMQP connection over a plain socket, to pipeline declares in one write."""

    def __init__(self, port: int, *, vhost: str, user: str, password: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.buffer = b""
        tune_ok = commands.Connection.TuneOk(channel_max=16, frame_max=131072, heartbeat=0)
        self.sock.sendall(
            inmemory.PROTOCOL_HEADER
            + inmemory.login_frames(user, password)
            + frame.marshal(tune_ok, 0)
            + frame.marshal(commands.Connection.Open(virtual_host=vhost), 0)
            + frame.marshal(commands.Channel.Open(), 1)
        )
        self.read_until(commands.Channel.OpenOk)

    def send(self, methods: list[object]) -> None:
        self.sock.sendall(b"".join(frame.marshal(method, 1) for method in methods))

    def next_frame(self) -> object:
        while True:
            if len(self.buffer) >= 7:
                size = struct.unpack(">I", self.buffer[3:7])[0]
                if len(self.buffer) >= size + 8:
                    whole, self.buffer = self.buffer[: size + 8], self.buffer[size + 8 :]
                    return frame.unmarshal(whole)[2]
            data = self.sock.recv(65536)
            assert data, "the broker closed the connection"
            self.buffer += data

    def read_until(self, kind: type) -> object:
        while True:
            received = self.next_frame()
            assert not isinstance(received, commands.Channel.Close | commands.Connection.Close), (
                received
            )
            if isinstance(received, kind):
                return received


@pytest.mark.timeout(300)
def test_declares_against_expensive_policies_do_not_stall_a_canary(hutch_broker):
    tenant = noisy.create_tenant(hutch_broker, "declarer")
    canary_tenant = noisy.create_tenant(hutch_broker, "canary")
    admin = management.Management(hutch_broker, timeout=120.0)
    for index in range(10):
        body = {"pattern": expensive_pattern(index), "definition": {"max-length": 1},
                "priority": 10 + index, "apply-to": "queues"}  # fmt: skip
        assert admin.put(f"/policies/declarer/slow{index}", body).ok
    cheap = {"pattern": "^[ab]", "definition": {"max-length": 7}, "priority": 0}
    assert admin.put("/policies/declarer/cheap", cheap).ok

    rng = random.Random(2026)
    names = ["".join(rng.choice("ab") for _ in range(255)) for _ in range(ROUNDS * PIPELINED)]
    attacker = RawClient(
        hutch_broker.amqp_port, vhost=tenant.vhost, user=tenant.user, password=tenant.password
    )
    answered: list[str] = []
    with noisy.Canary(
        hutch_broker, canary_tenant, broker_pid=cpuwait.loop_pid(hutch_broker)
    ) as canary:
        for start in range(0, len(names), PIPELINED):
            batch = names[start : start + PIPELINED]
            attacker.send([commands.Queue.Declare(queue=name) for name in batch])
            for _ in batch:
                reply = attacker.read_until(commands.Queue.DeclareOk)
                answered.append(reply.queue)  # type: ignore[attr-defined]
        report = canary.stop()
    attacker.sock.close()

    assert answered == names, "every declare-ok, in order"
    queues = admin.get("/queues/declarer").body
    policy_of = {item["name"]: item.get("policy") for item in queues}
    assert all(policy_of[name] == "cheap" for name in names), policy_of
    assert report.violations(LOOSE) == [], report.summary()


@pytest.mark.timeout(300)
def test_http_declares_against_expensive_policies_do_not_stall_a_canary(hutch_broker):
    """The same search for ``PUT /api/queues`` and ``/api/exchanges``: awaited a slice per turn.
    Twenty policies here, so that one PUT cost about 360 ms of loop time in one piece before."""
    tenant = noisy.create_tenant(hutch_broker, "putter", tags="management")
    canary_tenant = noisy.create_tenant(hutch_broker, "canary")
    admin = management.Management(hutch_broker, timeout=120.0)
    for index in range(20):
        body = {"pattern": expensive_pattern(index % 10), "definition": {"max-length": 1},
                "priority": 10 + index, "apply-to": "all"}  # fmt: skip
        assert admin.put(f"/policies/putter/slow{index}", body).ok
    cheap = {"pattern": "^[ab]", "definition": {"max-length": 7}, "priority": 0}
    assert admin.put("/policies/putter/cheap", cheap).ok
    endpoint = SimpleNamespace(http_url=hutch_broker.http_url, credentials=tenant.credentials)
    client = management.Management(endpoint, timeout=120.0)

    rng = random.Random(7)
    names = ["".join(rng.choice("ab") for _ in range(255)) for _ in range(HTTP_NAMES)]
    with noisy.Canary(
        hutch_broker, canary_tenant, broker_pid=cpuwait.loop_pid(hutch_broker)
    ) as canary:
        for name in names:
            assert client.put(f"/queues/putter/{name}", {"durable": False}).status == 201
            exchange = name[:127]
            assert client.put(f"/exchanges/putter/{exchange}", {"type": "fanout"}).status == 201
        report = canary.stop()

    queues = {item["name"]: item.get("policy") for item in admin.get("/queues/putter").body}
    exchanges = {item["name"]: item.get("policy") for item in admin.get("/exchanges/putter").body}
    assert all(queues[name] == "cheap" for name in names), queues
    assert all(exchanges[name[:127]] == "cheap" for name in names), exchanges
    assert report.violations(LOOSE) == [], report.summary()


@pytest.mark.timeout(300)
def test_deleting_an_exchange_and_a_queue_with_many_bindings_does_not_stall_a_canary(
    hutch_broker,
):
    """``exchange.delete`` over AMQP and ``DELETE /api/queues`` of a queue with tens of thousands
    of durable topic bindings: removed a slice per loop turn, the entity itself last."""
    tenant = noisy.create_tenant(hutch_broker, "binder", tags="management")
    canary_tenant = noisy.create_tenant(hutch_broker, "canary")
    attacker = RawClient(
        hutch_broker.amqp_port, vhost=tenant.vhost, user=tenant.user, password=tenant.password
    )
    setup: list[object] = [
        commands.Exchange.Declare(exchange="t", exchange_type="topic", durable=True),
        commands.Exchange.Declare(exchange="u", exchange_type="topic", durable=True),
        commands.Queue.Declare(queue="q", durable=True),
    ]
    for index in range(BINDINGS):
        setup.append(commands.Queue.Bind(queue="q", exchange="t", routing_key=f"a.{index}.#",
                                         nowait=True))  # fmt: skip
        setup.append(commands.Queue.Bind(queue="q", exchange="u", routing_key=f"b.{index}.#",
                                         nowait=True))  # fmt: skip
    attacker.send([*setup, commands.Queue.Declare(queue="q", passive=True)])
    attacker.read_until(commands.Queue.DeclareOk)
    endpoint = SimpleNamespace(http_url=hutch_broker.http_url, credentials=tenant.credentials)
    client = management.Management(endpoint, timeout=120.0)

    with noisy.Canary(
        hutch_broker, canary_tenant, broker_pid=cpuwait.loop_pid(hutch_broker)
    ) as canary:
        attacker.send([commands.Exchange.Delete(exchange="t"), commands.Queue.Declare(queue="r")])
        attacker.read_until(commands.Exchange.DeleteOk)
        assert attacker.read_until(commands.Queue.DeclareOk).queue == "r"  # type: ignore[attr-defined]
        assert client.delete("/queues/binder/q").status == 204
        report = canary.stop()
    attacker.sock.close()

    admin = management.Management(hutch_broker, timeout=120.0)
    assert admin.get("/exchanges/binder/t").status == 404
    assert admin.get("/queues/binder/q").status == 404
    assert [b for b in admin.get("/bindings/binder").body if b["destination"] == "q"] == []
    assert report.violations(LOOSE) == [], report.summary()
