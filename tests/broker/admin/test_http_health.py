"""Memory watermark, alarms and health checks over HTTP (MEM-7, API-2, API-9, API-13)."""

PUBLISH = {"properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"}


async def test_api_9_health_checks_ok(api, reference):
    for path in ("/api/health/checks/alarms", "/api/health/checks/local-alarms"):
        reply = await api.get(path)
        assert (reply.status, reply.body) == (200, reference("GET_health_checks_alarms.json"))


async def test_mem_7_watermark_get_and_put(api, memory):
    got = await api.get("/api/vm-memory-high-watermark")
    assert got.body == {"relative": 0.4, "mem_limit": 400_000_000}
    assert (await api.put("/api/vm-memory-high-watermark", {"absolute": 123456789})).status == 204
    got = await api.get("/api/vm-memory-high-watermark")
    assert got.body == {"absolute": 123456789, "mem_limit": 123456789}
    (node,) = (await api.get("/api/nodes")).body
    assert (node["mem_limit"], node["mem_alarm"]) == (123456789, False)


async def test_mem_7_bad_watermark_changes_nothing(api, memory):
    for body in ({"relative": 2}, {"absolute": -1}, {}, {"relative": 0.5, "absolute": 1}):
        reply = await api.put("/api/vm-memory-high-watermark", body)
        assert (reply.status, reply.body["error"]) == (400, "bad_request")
    assert memory.settings_json() == {"relative": 0.4}


async def test_mem_7_alarm_shows_everywhere_at_once(api, memory, broker):
    await api.put("/api/queues/%2F/q", {})
    assert (await api.put("/api/vm-memory-high-watermark", {"absolute": 1})).status == 204
    (node,) = (await api.get("/api/nodes")).body
    assert (node["mem_limit"], node["mem_alarm"]) == (1, True)
    alarms = await api.get("/api/health/checks/alarms")
    assert (alarms.status, alarms.body) == (
        503,
        {
            "status": "failed",
            "reason": "There are alarms in effect in the cluster",
            "alarms": [{"node": "hutch@localhost", "resource": "memory"}],
        },
    )
    assert (await api.get("/api/health/checks/local-alarms")).status == 503
    blocked = await api.post("/api/exchanges/%2F/amq.default/publish", PUBLISH)
    assert (blocked.status, blocked.body) == (
        503,
        {"error": "service_unavailable", "reason": "low on memory"},
    )
    assert broker.vhosts["/"].queues["q"].ready_count == 0
    # MEM-2: a watermark of 0 turns the monitor off and clears the alarm.
    assert (await api.put("/api/vm-memory-high-watermark", {"relative": 0})).status == 204
    assert (await api.get("/api/health/checks/alarms")).status == 200
    assert (await api.post("/api/exchanges/%2F/amq.default/publish", PUBLISH)).body == {
        "routed": True
    }


async def test_mem_7_watermark_needs_the_right_tags(api, user_api):
    mon = user_api("mon", ["monitoring"])
    assert (await mon.get("/api/vm-memory-high-watermark")).status == 200
    refused = await mon.put("/api/vm-memory-high-watermark", {"relative": 0.5})
    assert (refused.status, refused.body["reason"]) == (401, "Not administrator user")


async def test_api_9_aliveness(api, broker):
    assert (await api.get("/api/aliveness-test/%2F")).body == {"status": "ok"}
    assert broker.vhosts["/"].queues["aliveness-test"].ready_count == 0
    assert (await api.get("/api/aliveness-test/nowhere")).status == 404


async def test_api_2_single_node(api):
    assert (await api.get("/api/nodes/hutch@localhost")).body["name"] == "hutch@localhost"
    assert (await api.get("/api/nodes/rabbit@elsewhere")).status == 404
    assert (await api.get("/api/cluster-name")).body == {"name": "hutch@localhost"}
