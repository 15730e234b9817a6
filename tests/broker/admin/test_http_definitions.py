"""Definitions over HTTP (API-12): export, import into a fresh broker, per-vhost forms."""

from aiohttp.test_utils import TestClient, TestServer
from hutch_broker.admin.app import make_app
from hutch_broker.dispatch.context import Context
from hutch_broker.model.broker import Broker


async def test_api_12_round_trip_into_a_fresh_broker(topology, broker, api_on):
    exported = (await topology.get("/api/definitions")).body
    fresh = Broker(cluster_name="fresh")
    fresh.create_defaults()
    app = make_app(Context(fresh))
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        other = api_on(client)
        assert (await other.post("/api/definitions", exported)).status == 204
        assert (await other.post("/api/definitions", exported)).status == 204  # idempotent
        assert (await other.get("/api/definitions")).body == exported
    assert fresh.export_definitions() == broker.export_definitions()
    # Operator policies travel as parameters (API-12).
    (parameter,) = exported["parameters"]
    assert parameter["component"] == "operator_policy"


async def test_api_12_bad_import_changes_nothing(topology, broker):
    before = broker.export_definitions()
    document = {
        "exchanges": [{"name": "new.x", "vhost": "/", "type": "direct"}],
        "queues": [{"name": "mgmt.q", "vhost": "/", "durable": True, "arguments": {}}],
    }
    reply = await topology.post("/api/definitions", document)
    assert reply.status == 400
    assert reply.body["reason"].startswith("inequivalent arg")
    assert broker.export_definitions() == before
    not_json = await topology.call("POST", "/api/definitions", raw=b"{]")
    assert (not_json.status, not_json.body["reason"]) == (400, "not_json")


async def test_api_12_per_vhost_export_and_import(topology, broker):
    exported = await topology.get("/api/definitions/%2F")
    assert exported.status == 200
    assert "users" not in exported.body
    assert all("vhost" not in q for q in exported.body["queues"])
    assert (await topology.post("/api/definitions/mgmt-vh", exported.body)).status == 204
    copy = broker.vhosts["mgmt-vh"]
    assert set(copy.queues) == {"mgmt.q", "mgmt.q2", "bench.q"}
    assert set(copy.policies) == {"mgmt.pol"}
    assert set(copy.operator_policies) == {"mgmt.op"}
    assert (await topology.get("/api/definitions/nowhere")).status == 404
    assert (await topology.post("/api/definitions/nowhere", {})).status == 404


async def test_api_12_needs_an_administrator(api, user_api):
    bob = user_api("bob", ["management"], vhosts=("/",))
    assert (await bob.get("/api/definitions")).status == 401
    assert (await bob.post("/api/definitions", {})).status == 401
