"""Fixtures for the management API tests: an in-memory broker, a fixed clock, a real socket.

Pure view tests use ``broker`` directly.  HTTP tests use ``api``: the real
aiohttp application behind ``aiohttp.test_utils.TestServer`` on a loopback
port, called with Basic auth as guest.  ``reference/`` holds copies of the
captured RabbitMQ 3.10.8 responses (shared/reference/rabbitmq-3.10.8-mgmt),
so the shape comparisons run in any checkout.
"""

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hutch_broker.admin.app import make_app
from hutch_broker.admin.memory import FixedMemory
from hutch_broker.admin.views.overview import NodeInfo
from hutch_broker.dispatch.context import Context
from hutch_broker.model import access
from hutch_broker.model.broker import Broker
from hutch_testing import levels

NOW_MS = 1_795_342_369_163  # 2026-11-22T10:12:49.163Z, when the reference was captured
REFERENCE = Path(__file__).parent / "reference"
# Erlang internals RabbitMQ reports and Hutch may leave out (docs/contracts/broker.md#http-api).
ERLANG_ONLY = frozenset(
    {"backing_queue_status", "garbage_collection", "reductions", "reductions_details"}
)


def load_reference(name: str) -> Any:
    return json.loads((REFERENCE / name).read_text())


@pytest.fixture
def reference() -> Callable[[str], Any]:
    """``reference("GET_queues__2F_mgmt.q.json")`` -> the captured RabbitMQ body."""
    return load_reference


@pytest.fixture
def erlang_only() -> frozenset[str]:
    return ERLANG_ONLY


def clock() -> int:
    return NOW_MS


@pytest.fixture
def broker() -> Broker:
    broker = Broker(cluster_name="hutch@localhost", clock=clock)
    broker.create_defaults()
    return broker


@pytest.fixture
def context(broker: Broker) -> Context:
    return Context(broker, clock=clock)


@pytest.fixture
def memory() -> FixedMemory:
    return FixedMemory(total_memory=1_000_000_000, mem_used=100_000_000)


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class Api:
    """A management client: ``await api.put("/api/queues/%2F/q", {...})``."""

    def __init__(
        self,
        client: TestClient[web.Request, web.Application],
        user: str = "guest",
        password: str = "guest",
    ) -> None:
        self.client = client
        self.user = user
        self.password = password

    def as_user(self, user: str, password: str) -> "Api":
        return Api(self.client, user, password)

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        authenticate: bool = True,
    ) -> Reply:
        headers = {}
        if authenticate:
            headers["Authorization"] = aiohttp.encode_basic_auth(self.user, self.password)
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        if data is not None:
            headers["Content-Type"] = "application/json"
        async with self.client.request(method, path, data=data, headers=headers) as response:
            text = await response.text()
            if not text:
                return Reply(response.status, None, dict(response.headers))
            is_json = response.content_type == "application/json"
            parsed = json.loads(text) if is_json else text
            return Reply(response.status, parsed, dict(response.headers))

    async def get(self, path: str) -> Reply:
        return await self.call("GET", path)

    async def put(self, path: str, body: Any = None) -> Reply:
        return await self.call("PUT", path, body)

    async def post(self, path: str, body: Any = None) -> Reply:
        return await self.call("POST", path, body)

    async def delete(self, path: str) -> Reply:
        return await self.call("DELETE", path)


@pytest.fixture
@levels.broker_level  # aiohttp's TestServer listens on loopback
async def client(
    context: Context, memory: FixedMemory
) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = make_app(context, memory=memory, node=NodeInfo(started_at_ms=NOW_MS - 378_957))
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client


@pytest.fixture
def api(client: TestClient[web.Request, web.Application]) -> Api:
    return Api(client)


@pytest.fixture
def api_on() -> Callable[[TestClient[web.Request, web.Application]], Api]:
    """An ``Api`` (as guest) for another test client, e.g. a second broker's."""
    return Api


@pytest.fixture
def user_api(api: Api, broker: Broker) -> Callable[..., Api]:
    """``user_api("bob", ["management"], vhosts=("/",))``: a new user (password = name)."""

    def make(name: str, tags: list[str], *, vhosts: tuple[str, ...] = ()) -> Api:
        broker.put_user(name, access.hash_password(name), tags)
        for vhost in vhosts:
            broker.set_permission(vhost, name, ".*", ".*", ".*")
        return api.as_user(name, name)

    return make


@pytest.fixture
async def topology(api: Api) -> Api:
    """The reference capture's objects, built over HTTP; returns the guest ``api``."""
    await build_reference_topology(api)
    return api


async def build_reference_topology(api: Api) -> None:
    """The objects the reference capture was taken with (shared/reference)."""
    steps: list[tuple[str, str, Any]] = [
        ("PUT", "/api/vhosts/mgmt-vh", {"description": "test vhost", "tags": "a,b"}),
        ("PUT", "/api/exchanges/%2F/mgmt.ae", {"type": "fanout", "durable": True}),
        (
            "PUT",
            "/api/exchanges/%2F/mgmt.x",
            {"type": "topic", "durable": True, "arguments": {"alternate-exchange": "mgmt.ae"}},
        ),
        (
            "PUT",
            "/api/queues/%2F/mgmt.q",
            {
                "durable": True,
                "arguments": {
                    "x-dead-letter-exchange": "mgmt.ae",
                    "x-max-length": 10,
                    "x-message-ttl": 60000,
                    "x-overflow": "reject-publish",
                },
            },
        ),
        ("PUT", "/api/queues/%2F/mgmt.q2", {"durable": True}),
        ("PUT", "/api/queues/%2F/bench.q", {"durable": False}),
        (
            "POST",
            "/api/bindings/%2F/e/mgmt.x/q/mgmt.q",
            {"routing_key": "a.*", "arguments": {"x-foo": "bar"}},
        ),
        ("POST", "/api/bindings/%2F/e/mgmt.ae/q/mgmt.q2", {"routing_key": ""}),
        (
            "PUT",
            "/api/policies/%2F/mgmt.pol",
            {
                "pattern": "^mgmt\\.q$",
                "apply-to": "queues",
                "priority": 1,
                "definition": {
                    "dead-letter-routing-key": "dl",
                    "max-length": 5,
                    "message-ttl": 30000,
                },
            },
        ),
        (
            "PUT",
            "/api/operator-policies/%2F/mgmt.op",
            {
                "pattern": "^mgmt\\.",
                "apply-to": "queues",
                "definition": {"expires": 3600000, "max-length": 3},
            },
        ),
        (
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            {
                "properties": {"delivery_mode": 2, "headers": {"h": 1}},
                "routing_key": "mgmt.q",
                "payload": "hello",
                "payload_encoding": "string",
            },
        ),
    ]
    for method, path, body in steps:
        reply = await api.call(method, path, body)
        assert reply.status in (200, 201, 204), (method, path, reply)
