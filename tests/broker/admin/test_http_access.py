"""Authentication, authorisation, vhosts, users and permissions over HTTP (API-3, API-4)."""

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hutch_broker.admin.app import make_app
from hutch_broker.model import access


async def test_no_credentials_is_401_with_challenge(api):
    reply = await api.call("GET", "/api/overview", authenticate=False)
    assert (reply.status, reply.body) == (
        401,
        {"error": "not_authorized", "reason": "Not_Authorized"},
    )
    assert reply.headers["WWW-Authenticate"] == 'Basic realm="RabbitMQ Management"'


async def test_wrong_password_is_401(api):
    reply = await api.as_user("guest", "nope").get("/api/overview")
    assert (reply.status, reply.body["reason"]) == (401, "Not_Authorized")


@web.middleware
async def from_remote_host(request, handler):
    """Pretend the request came from a non-loopback peer (the socket itself is loopback)."""
    return await handler(request.clone(remote="10.1.2.3"))


@pytest.fixture
async def remote_api(context, memory):
    app = make_app(context, memory=memory)
    app.middlewares.insert(0, from_remote_host)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client


async def test_guest_from_remote_host_is_refused(remote_api, api, user_api):
    headers = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with remote_api.get("/api/whoami", headers=headers) as response:
        assert response.status == 401
        assert await response.json() == {
            "error": "not_authorized",
            "reason": "User can only log in via localhost",
        }
    user_api("ops", ["management"])
    headers = {"Authorization": aiohttp.encode_basic_auth("ops", "ops")}
    async with remote_api.get("/api/whoami", headers=headers) as response:
        assert response.status == 200


async def test_user_without_tags_is_not_management(api, user_api):
    reply = await user_api("app", []).get("/api/overview")
    assert reply.body == {"error": "not_authorized", "reason": "Not management user"}


async def test_management_user_sees_only_permitted_vhosts(api, broker, user_api):
    broker.add_vhost("private")
    bob = user_api("bob", ["management"], vhosts=("/",))
    assert [v["name"] for v in (await bob.get("/api/vhosts")).body] == ["/"]
    assert (await bob.get("/api/vhosts/private")).status == 401
    assert (await bob.get("/api/queues/private")).body == {
        "error": "not_authorized",
        "reason": "User not authorised to access virtual host",
    }
    assert (await bob.get("/api/users")).body["reason"] == "Not administrator user"
    assert (await bob.get("/api/nodes")).body["reason"] == "Not monitor user"
    assert (await bob.get("/api/whoami")).body == {"name": "bob", "tags": ["management"]}
    assert (await bob.put("/api/queues/%2F/bobs", {})).status == 201
    assert (await bob.put("/api/queues/private/bobs", {})).status == 401


async def test_monitoring_user_sees_everything_changes_nothing_foreign(api, broker, user_api):
    broker.add_vhost("private")
    mon = user_api("mon", ["monitoring"])
    assert [v["name"] for v in (await mon.get("/api/vhosts")).body] == ["/", "private"]
    assert (await mon.get("/api/nodes")).status == 200
    assert (await mon.put("/api/queues/private/q", {})).status == 401


async def test_amqp_permissions_apply_to_http_operations(api, broker, user_api):
    reader = user_api("reader", ["management"])
    broker.set_permission("/", "reader", "^$", "^$", ".*")
    refused = await reader.put("/api/queues/%2F/q", {})
    assert refused.body == {
        "error": "not_authorized",
        "reason": "access to queue 'q' in vhost '/' refused for user 'reader'",
    }
    assert "q" not in broker.vhosts["/"].queues
    await api.put("/api/queues/%2F/q", {})
    publish = await reader.post(
        "/api/exchanges/%2F/amq.default/publish",
        {"properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"},
    )
    assert publish.status == 401
    got = await reader.post(
        "/api/queues/%2F/q/get", {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
    )
    assert (got.status, got.body) == (200, [])


async def test_administrators_need_permissions_for_object_operations(api, broker):
    broker.add_vhost("bare")
    refused = await api.put("/api/queues/bare/q", {})
    assert refused.status == 401
    assert refused.body["reason"] == "access to queue 'q' in vhost 'bare' refused for user 'guest'"


async def test_api_3_vhost_lifecycle_grants_creator(api, broker):
    created = await api.put("/api/vhosts/v1", {"description": "d", "tags": ["x", "y"]})
    assert created.status == 201
    assert broker.permission("v1", "guest") is not None
    assert (await api.put("/api/vhosts/v1", {"description": "e"})).status == 204
    item = (await api.get("/api/vhosts/v1")).body
    # A PUT replaces the metadata (RabbitMQ 3.10.8: tags not given become [], side by side in
    # tests/sidebyside/test_vhost_metadata.py).
    assert (item["description"], item["tags"]) == ("e", [])
    assert (await api.put("/api/queues/v1/q", {})).status == 201
    perms = await api.get("/api/vhosts/v1/permissions")
    assert [p["user"] for p in perms.body] == ["guest"]
    assert (await api.delete("/api/vhosts/v1")).status == 204
    assert "v1" not in broker.vhosts
    assert (await api.delete("/api/vhosts/v1")).status == 404
    assert (await api.get("/api/vhosts/v1")).status == 404


async def test_api_3_bad_vhost_body_changes_nothing(api, broker):
    reply = await api.put("/api/vhosts/v1", {"tags": [1, 2]})
    assert reply.status == 400
    assert "v1" not in broker.vhosts


async def test_api_4_user_lifecycle(api, broker):
    created = await api.put("/api/users/alice", {"password": "s3cret", "tags": "management"})
    assert created.status == 201
    assert broker.authenticate("alice", "s3cret") is not None
    alice = api.as_user("alice", "s3cret")
    assert (await alice.get("/api/whoami")).body == {"name": "alice", "tags": ["management"]}
    # Changing only the tags keeps the password.
    assert (await api.put("/api/users/alice", {"tags": "monitoring"})).status == 204
    assert broker.authenticate("alice", "s3cret").tags == ["monitoring"]
    item = (await api.get("/api/users/alice")).body
    assert item["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    listed = await api.get("/api/users")
    assert [u["name"] for u in listed.body] == ["alice", "guest"]
    assert (await api.delete("/api/users/alice")).status == 204
    assert (await api.get("/api/users/alice")).status == 404
    assert (await api.delete("/api/users/alice")).status == 404


async def test_api_4_user_with_password_hash(api, broker):
    password_hash = access.hash_password("pw", b"\x01\x02\x03\x04")
    reply = await api.put(
        "/api/users/hashed",
        {
            "password_hash": password_hash,
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": ["management"],
        },
    )
    assert reply.status == 201
    assert broker.authenticate("hashed", "pw") is not None
    bad = await api.put(
        "/api/users/md5", {"password_hash": "x", "hashing_algorithm": "rabbit_password_hashing_md5"}
    )
    assert bad.status == 400
    assert "md5" not in broker.users


async def test_api_4_permissions_lifecycle(api, broker):
    await api.put("/api/users/bob", {"password": "pw", "tags": ""})
    body = {"configure": "^bob\\.", "write": ".*", "read": ".*"}
    assert (await api.put("/api/permissions/%2F/bob", body)).status == 201
    assert (await api.put("/api/permissions/%2F/bob", body)).status == 204
    item = (await api.get("/api/permissions/%2F/bob")).body
    assert item == {"user": "bob", "vhost": "/", **body}
    listed = await api.get("/api/permissions")
    assert {(p["vhost"], p["user"]) for p in listed.body} == {("/", "guest"), ("/", "bob")}
    assert [p["vhost"] for p in (await api.get("/api/users/bob/permissions")).body] == ["/"]
    assert (await api.delete("/api/permissions/%2F/bob")).status == 204
    assert broker.permission("/", "bob") is None
    assert (await api.delete("/api/permissions/%2F/bob")).status == 404


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/api/permissions/%2F/bob", {"configure": "(", "write": "", "read": ""}, 400),
        ("/api/permissions/%2F/bob", {"configure": ".*", "write": ".*"}, 400),
        ("/api/permissions/nowhere/bob", {"configure": "", "write": "", "read": ""}, 400),
        ("/api/permissions/%2F/nobody", {"configure": "", "write": "", "read": ""}, 400),
    ],
)
async def test_api_4_bad_permissions_change_nothing(api, broker, path, body, status):
    await api.put("/api/users/bob", {"password": "pw"})
    reply = await api.put(path, body)
    assert reply.status == status
    assert broker.permission("/", "bob") is None
