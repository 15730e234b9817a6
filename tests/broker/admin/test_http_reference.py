"""Side by side with the captured RabbitMQ 3.10.8 answers, over a real loopback socket.

The topology fixture issues the same requests the reference capture made;
each test compares one endpoint's status, key set and the values that are
not statistics.
"""

import pytest

pytestmark = pytest.mark.usefixtures("topology")


def strip_key(items):
    """``properties_key`` hashes differ (docs/contracts/broker.md#differences); the rest must match."""
    return [{**item, "properties_key": item["properties_key"].split("~")[0]} for item in items]


async def test_api_7_queue_matches_reference(api, reference, erlang_only):
    reply = await api.get("/api/queues/%2F/mgmt.q")
    expected = reference("GET_queues__2F_mgmt.q.json")
    assert reply.status == 200
    assert set(reply.body) == set(expected) - erlang_only
    for key in (
        "arguments",
        "auto_delete",
        "durable",
        "effective_policy_definition",
        "exclusive",
        "messages",
        "messages_ready",
        "messages_unacknowledged",
        "message_bytes",
        "message_bytes_persistent",
        "messages_persistent",
        "operator_policy",
        "policy",
        "consumers",
        "consumer_details",
        "state",
        "type",
        "vhost",
        "name",
    ):
        assert reply.body[key] == expected[key], key
    assert reply.body["idle_since"] == "2026-11-22T10:12:49.163+00:00"


async def test_api_7_queue_list_matches_reference(api, reference, erlang_only):
    reply = await api.get("/api/queues/%2F")
    expected = reference("GET_queues__2F.json")
    assert [q["name"] for q in reply.body] == [q["name"] for q in expected]
    for mine, theirs in zip(reply.body, expected, strict=True):
        assert set(mine) == set(theirs) - erlang_only
        assert mine["effective_policy_definition"] == theirs["effective_policy_definition"]
        assert mine["messages"] == theirs["messages"]


async def test_api_7_missing_queue_is_object_not_found(api, reference):
    reply = await api.get("/api/queues/%2F/nonexistent")
    assert (reply.status, reply.body) == (404, reference("GET_queues__2F_nonexistent.json"))


async def test_api_7_inequivalent_redeclare_matches_reference(api, reference):
    reply = await api.put("/api/queues/%2F/mgmt.q", {"durable": True})
    assert (reply.status, reply.body) == (400, reference("PUT_queues__2F_mgmt.q.json"))


async def test_paging_and_columns_match_reference(api, reference):
    assert (await api.get("/api/aliveness-test/%2F")).body == reference(
        "GET_aliveness-test__2F.json"
    )
    paged = await api.get("/api/queues?page=1&page_size=2&name=mgmt&use_regex=false")
    expected = reference("GET_queues?page=1&page_size=2&name=mgmt&use_regex=false.json")
    assert {k: v for k, v in paged.body.items() if k != "items"} == {
        k: v for k, v in expected.items() if k != "items"
    }
    columns = await api.get(
        "/api/queues/%2F?columns=name,messages,arguments,effective_policy_definition"
    )
    expected = reference(
        "GET_queues__2F?columns=name,messages,arguments,effective_policy_definition.json"
    )
    assert columns.body[1:] == expected[1:]
    assert expected[0].items() <= columns.body[0].items()


async def test_api_10_bindings_match_reference(api, reference):
    reply = await api.get("/api/bindings/%2F")
    assert strip_key(reply.body) == strip_key(reference("GET_bindings__2F.json"))
    edge = await api.get("/api/bindings/%2F/e/mgmt.x/q/mgmt.q")
    assert strip_key(edge.body) == strip_key(reference("GET_bindings__2F_e_mgmt.x_q_mgmt.q.json"))
    source = await api.get("/api/exchanges/%2F/mgmt.x/bindings/source")
    assert strip_key(source.body) == strip_key(
        reference("GET_exchanges__2F_mgmt.x_bindings_source.json")
    )
    queue = await api.get("/api/queues/%2F/mgmt.q/bindings")
    assert strip_key(queue.body) == strip_key(reference("GET_queues__2F_mgmt.q_bindings.json"))


async def test_api_5_exchange_matches_reference(api, reference):
    reply = await api.get("/api/exchanges/%2F/mgmt.x")
    expected = reference("GET_exchanges__2F_mgmt.x.json")
    assert set(expected) <= set(reply.body)
    assert {k: reply.body[k] for k in expected if k != "user_who_performed_action"} == {
        k: v for k, v in expected.items() if k != "user_who_performed_action"
    }
    default = await api.get("/api/exchanges/%2F/amq.default")
    assert set(default.body) == set(reference("GET_exchanges__2F_amq.default.json"))
    assert default.body["name"] == ""


async def test_api_11_policies_match_reference(api, reference):
    for path, name in [
        ("/api/policies", "GET_policies.json"),
        ("/api/policies/%2F", "GET_policies__2F.json"),
        ("/api/policies/%2F/mgmt.pol", "GET_policies__2F_mgmt.pol.json"),
        ("/api/operator-policies", "GET_operator-policies.json"),
        ("/api/operator-policies/%2F/mgmt.op", "GET_operator-policies__2F_mgmt.op.json"),
    ]:
        reply = await api.get(path)
        assert reply.body == reference(name), path
    item = (await api.get("/api/policies/%2F/mgmt.pol")).body
    assert list(item) == ["vhost", "name", "pattern", "apply-to", "definition", "priority"]
    missing = await api.get("/api/policies/%2F/nonexistent")
    assert (missing.status, missing.body) == (404, reference("GET_policies__2F_nonexistent.json"))


async def test_pol_8_validation_failures_match_reference(api, reference):
    bad = await api.put(
        "/api/policies/%2F/mgmt.bad", {"pattern": ".*", "definition": {"max-length": -1}}
    )
    assert (bad.status, bad.body) == (400, reference("PUT_policies__2F_mgmt.bad.json"))
    bad_op = await api.put(
        "/api/operator-policies/%2F/mgmt.bad",
        {"pattern": ".*", "definition": {"dead-letter-exchange": "x"}},
    )
    assert (bad_op.status, bad_op.body) == (
        400,
        reference("PUT_operator-policies__2F_mgmt.bad.json"),
    )


async def test_api_3_vhosts_match_reference(api, reference):
    listed = await api.get("/api/vhosts")
    expected = reference("GET_vhosts.json")
    assert [v["name"] for v in listed.body] == [v["name"] for v in expected]
    assert set(listed.body[0]) == set(expected[0])
    one = await api.get("/api/vhosts/mgmt-vh")
    theirs = reference("GET_vhosts_mgmt-vh.json")
    assert list(one.body) == list(theirs)
    assert {k: one.body[k] for k in ("name", "description", "tags", "metadata", "tracing")} == {
        k: theirs[k] for k in ("name", "description", "tags", "metadata", "tracing")
    }


async def test_api_8_get_matches_reference(api, reference):
    reply = await api.post(
        "/api/queues/%2F/mgmt.q/get",
        {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
    )
    assert (reply.status, reply.body) == (200, reference("POST_queues__2F_mgmt.q_get.json"))


async def test_api_6_publish_matches_reference(api, reference):
    reply = await api.post(
        "/api/exchanges/%2F/amq.default/publish",
        {"properties": {}, "routing_key": "mgmt.q2", "payload": "x", "payload_encoding": "string"},
    )
    assert (reply.status, reply.body) == (
        200,
        reference("POST_exchanges__2F_amq.default_publish.json"),
    )


async def test_api_12_definitions_match_reference(api, reference):
    mine = (await api.get("/api/definitions")).body
    theirs = reference("GET_definitions.json")
    assert set(mine) == set(theirs)
    for section in ("permissions", "parameters", "policies", "exchanges", "bindings"):
        assert sorted(mine[section], key=repr) == sorted(theirs[section], key=repr), section
    assert sorted(mine["queues"], key=repr) == sorted(theirs["queues"], key=repr)
    assert [v["name"] for v in mine["vhosts"]] == [v["name"] for v in theirs["vhosts"]]
    assert set(mine["users"][0]) == set(theirs["users"][0])


async def test_api_1_and_api_2_keys(api, reference):
    overview = await api.get("/api/overview")
    assert set(overview.body) == set(reference("GET_overview.json"))
    assert overview.body["queue_totals"]["messages"] == 1
    assert overview.body["object_totals"]["queues"] == 3
    nodes = await api.get("/api/nodes")
    assert set(nodes.body[0]) == set(reference("GET_nodes.json")[0])
    assert nodes.body[0]["uptime"] == 378_957
    assert (await api.get("/api/whoami")).body == reference("GET_whoami.json")
