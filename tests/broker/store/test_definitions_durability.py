"""Definitions on a real broker: kill -9 keeps every confirmed change and no deleted thing.

Also the two properties the journal exists for, checked without a clock: a declare appends the
same few bytes however many queues exist (and never rewrites the snapshot), and a management
reply goes out only after its change is on disk, like an AMQP declare-ok.
"""

from __future__ import annotations

import asyncio
import signal

import aio_pika
import aiohttp
import pika
from aiohttp import web
from hutch_broker.server.app import BrokerServer
from hutch_broker.store import DefinitionsStore, definitions, journal, load_definitions
from hutch_demo import probes
from hutch_demo.management import Management, quote
from hutch_testing.clients import connect, drain

PERSISTENT = pika.BasicProperties(delivery_mode=2)


class Expected:
    """What the broker confirmed, in the shape GET /api/definitions reports it."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, str], dict] = {}
        self.exchanges: dict[tuple[str, str], str] = {}
        self.bindings: set[tuple[str, str, str, str, str]] = set()
        self.policies: dict[tuple[str, str], dict] = {}
        self.operator_policies: dict[tuple[str, str], dict] = {}
        self.permissions: set[tuple[str, str]] = set()
        self.users: set[str] = set()
        self.vhosts: set[str] = set()

    def drop_queue(self, vhost: str, name: str) -> None:
        del self.queues[vhost, name]
        self.bindings = {b for b in self.bindings if not (b[0] == vhost and b[3] == name)}

    def drop_exchange(self, vhost: str, name: str) -> None:
        del self.exchanges[vhost, name]
        self.bindings = {b for b in self.bindings if not (b[0] == vhost and name in (b[1], b[3]))}


def found(definitions: dict) -> Expected:
    seen = Expected()
    seen.queues = {(q["vhost"], q["name"]): q["arguments"] for q in definitions["queues"]}
    seen.exchanges = {(x["vhost"], x["name"]): x["type"] for x in definitions["exchanges"]}
    seen.bindings = {
        (b["vhost"], b["source"], b["destination_type"], b["destination"], b["routing_key"])
        for b in definitions["bindings"]
    }
    seen.policies = {(p["vhost"], p["name"]): p["definition"] for p in definitions["policies"]}
    seen.operator_policies = {
        (p["vhost"], p["name"]): p["value"]["definition"]
        for p in definitions["parameters"]
        if p["component"] == "operator_policy"
    }
    seen.permissions = {(p["vhost"], p["user"]) for p in definitions["permissions"]}
    seen.users = {u["name"] for u in definitions["users"]}
    seen.vhosts = {v["name"] for v in definitions["vhosts"]}
    return seen


def ok(response) -> None:
    assert response.ok, response


def amqp_round(broker, expected: Expected, tag: str) -> None:
    """Durable and transient topology over AMQP, some of it deleted again."""
    connection = connect(broker)
    channel = connection.channel()
    for index in range(40):
        exchange, queue = f"{tag}-ax{index}", f"{tag}-aq{index}"
        channel.exchange_declare(exchange, "topic", durable=True)
        channel.queue_declare(queue, durable=True, arguments={"x-max-length": 100 + index})
        channel.queue_bind(queue, exchange, f"k.{index}.#")
        expected.exchanges["/", exchange] = "topic"
        expected.queues["/", queue] = {"x-max-length": 100 + index}
        expected.bindings.add(("/", exchange, "queue", queue, f"k.{index}.#"))
    channel.exchange_bind(f"{tag}-ax1", f"{tag}-ax0", "e2e")
    expected.bindings.add(("/", f"{tag}-ax0", "exchange", f"{tag}-ax1", "e2e"))
    channel.exchange_declare(f"{tag}-tx", "direct", durable=False)
    channel.queue_declare(f"{tag}-tq", durable=False)
    channel.queue_bind(f"{tag}-tq", f"{tag}-ax0", "transient")
    channel.queue_declare(f"{tag}-xq", durable=True, exclusive=True)
    channel.queue_bind(f"{tag}-xq", f"{tag}-ax0", "exclusive")
    for index in range(0, 40, 3):
        channel.queue_delete(f"{tag}-aq{index}")
        expected.drop_queue("/", f"{tag}-aq{index}")
    channel.exchange_delete(f"{tag}-ax1")
    expected.drop_exchange("/", f"{tag}-ax1")
    channel.queue_unbind(f"{tag}-aq2", f"{tag}-ax2", "k.2.#")
    expected.bindings.discard(("/", f"{tag}-ax2", "queue", f"{tag}-aq2", "k.2.#"))
    channel.confirm_delivery()
    for number in range(5):
        channel.basic_publish("", f"{tag}-aq4", b"kept %d" % number, PERSISTENT)
    connection.close()


def http_round(api: Management, expected: Expected, tag: str) -> None:
    """Durable topology, policies, vhosts, users and permissions over the management API."""
    for index in range(40):
        queue, exchange = f"{tag}-hq{index}", f"{tag}-hx{index}"
        ok(
            api.put(
                f"/queues/%2F/{queue}",
                {"durable": True, "arguments": {"x-max-length": 1000 + index}},
            )
        )
        ok(api.put(f"/exchanges/%2F/{exchange}", {"type": "fanout", "durable": True}))
        ok(api.post(f"/bindings/%2F/e/{exchange}/q/{queue}", {"routing_key": f"r{index}"}))
        expected.queues["/", queue] = {"x-max-length": 1000 + index}
        expected.exchanges["/", exchange] = "fanout"
        expected.bindings.add(("/", exchange, "queue", queue, f"r{index}"))
    ok(api.put(f"/queues/%2F/{tag}-transient", {"durable": False}))
    for index in range(0, 40, 4):
        ok(api.delete(f"/queues/%2F/{tag}-hq{index}"))
        expected.drop_queue("/", f"{tag}-hq{index}")
    ok(api.delete(f"/exchanges/%2F/{tag}-hx5"))
    expected.drop_exchange("/", f"{tag}-hx5")
    api.set_policy(f"{tag}-keep", f"^{tag}-aq", {"max-length": 50})
    api.set_policy(f"{tag}-gone", "^nothing", {"expires": 100000})
    api.set_policy(f"{tag}-op", "^.*", {"max-length": 1000}, operator=True)
    ok(api.delete_policy(f"{tag}-gone"))
    expected.policies["/", f"{tag}-keep"] = {"max-length": 50}
    expected.operator_policies["/", f"{tag}-op"] = {"max-length": 1000}
    vhost, user, gone = f"{tag}-vhost", f"{tag}-alice", f"{tag}-bob"
    ok(api.put(f"/vhosts/{quote(vhost)}", {"description": "second"}))  # guest gets access
    ok(api.put(f"/users/{user}", {"password": "secret", "tags": "management"}))
    ok(api.put(f"/users/{gone}", {"password": "secret", "tags": ""}))
    ok(api.put(f"/permissions/{quote(vhost)}/{user}", {"configure": "", "write": "", "read": ".*"}))
    ok(api.put(f"/permissions/%2F/{gone}", {"configure": "", "write": "", "read": ".*"}))
    ok(api.delete(f"/permissions/{quote(vhost)}/guest"))  # a change the model cannot describe
    ok(api.delete(f"/users/{gone}"))
    expected.vhosts.add(vhost)
    expected.users.add(user)
    expected.permissions.add((vhost, user))
    expected.queues["/", f"{tag}-last"] = {}


def check(api: Management, expected: Expected) -> None:
    seen = found(api.get("/definitions").body)
    assert seen.queues == expected.queues
    assert seen.exchanges == expected.exchanges
    assert seen.bindings == expected.bindings
    assert seen.policies == expected.policies
    assert seen.operator_policies == expected.operator_policies
    assert seen.permissions == expected.permissions
    assert seen.users == expected.users
    assert seen.vhosts == expected.vhosts


def test_confirmed_definitions_survive_kill_minus_nine(hutch_broker):
    api = Management(hutch_broker)
    expected = Expected()
    expected.vhosts.add("/")
    expected.users.add("guest")
    expected.permissions.add(("/", "guest"))

    for round_number in range(2):  # the second round runs on a compacted journal
        tag = f"r{round_number}"
        amqp_round(hutch_broker, expected, tag)
        http_round(api, expected, tag)
        channel = connect(hutch_broker).channel()
        channel.confirm_delivery()  # into a queue and through an exchange declared over HTTP
        channel.basic_publish(f"{tag}-hx1", "", b"kept", PERSISTENT)
        ok(api.put(f"/queues/%2F/{tag}-last", {"durable": True}))  # killed right after this reply
        hutch_broker.kill(signal.SIGKILL)
        hutch_broker.start()
        check(api, expected)
        channel = connect(hutch_broker).channel()
        assert drain(channel, f"{tag}-aq4") == [b"kept %d" % number for number in range(5)]
        assert drain(channel, f"{tag}-hq1") == [b"kept"]

    # Only the queues that held a message have a message-log directory.
    assert len([p for p in (hutch_broker.data_dir / "msgs" / "msgs").iterdir() if p.is_dir()]) == 4


def test_a_declare_appends_the_same_bytes_however_many_queues_exist(hutch_broker):
    api = Management(hutch_broker)
    journal = hutch_broker.data_dir / "definitions.log"
    snapshot = hutch_broker.data_dir / "definitions.json"
    channel = connect(hutch_broker).channel()

    def declare(first: int, count: int) -> None:
        for index in range(first, first + count):
            channel.queue_declare(f"scale-{index:06d}", durable=True)

    def growth(first: int) -> tuple[int, int]:
        """Journal bytes appended by 10 AMQP declares, then by 10 management PUTs."""
        start = journal.stat().st_size
        declare(first, 10)
        middle = journal.stat().st_size
        for index in range(first + 10, first + 20):
            ok(api.put(f"/queues/%2F/scale-{index:06d}", {"durable": True}))
        return middle - start, journal.stat().st_size - middle

    before = snapshot.stat()
    declare(0, 10)
    with_few = growth(10)
    declare(30, 3000)
    with_many = growth(3030)

    assert with_few == with_many
    assert with_few[0] < 10 * 150  # a record per declare, not the definitions
    after = snapshot.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


async def request(server: BrokerServer, method: str, path: str, body=None) -> int:
    url = f"http://127.0.0.1:{server.config.http_port}{path}"
    headers = {"Authorization": probes.basic_auth("guest", "guest")}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.request(method, url, json=body) as reply,
    ):
        return reply.status


async def put_queue(server: BrokerServer, name: str) -> int:
    return await request(server, "PUT", f"/api/queues/%2F/{name}", {"durable": True})


async def get(server: BrokerServer, path: str) -> int:
    return await request(server, "GET", path)


async def test_a_management_reply_waits_for_its_definition_on_disk(server, monkeypatch):
    order = []
    commit = server.definitions.commit
    prepare = web.StreamResponse.prepare

    def recorded_commit():
        commit()
        order.append("on disk")

    async def recorded_prepare(response, request):
        if request.method == "PUT":
            order.append("reply")
        return await prepare(response, request)

    monkeypatch.setattr(server.definitions, "commit", recorded_commit)
    monkeypatch.setattr(web.StreamResponse, "prepare", recorded_prepare)

    assert await put_queue(server, "q") == 201
    assert order == ["on disk", "reply"]


def failing_fdatasync(fd):
    raise OSError(5, "Input/output error")


async def test_a_change_that_could_not_be_saved_stops_the_broker(server, monkeypatch):
    """After a failed fdatasync nothing is acknowledged and the broker stops, as PostgreSQL
    does since "fsyncgate": a later fsync could succeed without the lost pages."""
    assert await put_queue(server, "kept") == 201
    monkeypatch.setattr(definitions, "_fdatasync", failing_fdatasync)
    try:
        status = await put_queue(server, "q")
    except aiohttp.ClientError:
        status = None  # the listener went away first
    assert status in (500, None)
    await asyncio.wait_for(server.wait_stopped(), 10)
    assert server.failed
    monkeypatch.undo()
    on_disk = DefinitionsStore(server.config.data_dir).recover()
    assert "kept" in {queue["name"] for queue in on_disk["queues"]}


async def test_no_declare_ok_for_a_queue_that_could_not_be_saved(server, monkeypatch):
    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{server.config.amqp_port}/")
    channel = await connection.channel()
    await channel.declare_queue("before", durable=True)
    monkeypatch.setattr(definitions, "_fdatasync", failing_fdatasync)
    declared = asyncio.ensure_future(channel.declare_queue("lost", durable=True))
    done, _ = await asyncio.wait([declared], timeout=10)
    assert done, "the client was left hanging instead of disconnected"
    # Any connection error will do; a declare-ok will not.
    assert declared.exception() is not None, "declare-ok for a queue that is not on disk"
    await asyncio.wait_for(server.wait_stopped(), 10)
    assert server.failed
    await connection.close()


def test_after_a_clean_stop_the_snapshot_holds_everything(hutch_broker):
    channel = connect(hutch_broker).channel()
    channel.queue_declare("kept", durable=True)
    hutch_broker.stop()
    snapshot = load_definitions(hutch_broker.data_dir / "definitions.json")
    assert "kept" in {queue["name"] for queue in snapshot["queues"]}
    assert (hutch_broker.data_dir / "definitions.log").read_bytes() == journal.FILE_HEADER
