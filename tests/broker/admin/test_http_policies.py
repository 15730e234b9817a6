"""Policies and operator policies over HTTP (API-11, POL-8): lifecycle, texts, who may."""

import pytest

POLICY = {"pattern": "^q$", "definition": {"max-length": 2}, "apply-to": "queues"}


async def test_api_11_policy_lifecycle_applies_at_once(api, broker):
    await api.put("/api/queues/%2F/q", {})
    assert (await api.put("/api/policies/%2F/p", POLICY)).status == 201
    queue = broker.vhosts["/"].queues["q"]
    assert queue.settings.max_length == 2
    assert (await api.get("/api/queues/%2F/q")).body["policy"] == "p"
    updated = await api.put("/api/policies/%2F/p", {**POLICY, "definition": {"max-length": 1}})
    assert updated.status == 204
    assert queue.settings.max_length == 1
    assert (await api.delete("/api/policies/%2F/p")).status == 204
    assert queue.settings.max_length is None
    assert (await api.delete("/api/policies/%2F/p")).status == 404


async def test_api_11_operator_policy_lifecycle(api, broker):
    await api.put("/api/queues/%2F/q", {"arguments": {"x-max-length": 10}})
    assert (await api.put("/api/operator-policies/%2F/cap", POLICY)).status == 201
    item = (await api.get("/api/queues/%2F/q")).body
    assert item["operator_policy"] == "cap"
    assert item["effective_policy_definition"] == {"max-length": 2}
    assert broker.vhosts["/"].queues["q"].settings.max_length == 2
    assert [p["name"] for p in (await api.get("/api/operator-policies/%2F")).body] == ["cap"]
    assert (await api.delete("/api/operator-policies/%2F/cap")).status == 204
    assert (await api.get("/api/operator-policies/%2F/cap")).status == 404


async def test_pol_8_missing_key_is_a_bare_reason(api, broker):
    """RabbitMQ 3.10.8 answers a missing key without the "Validation failed" wrapper."""
    reply = await api.put("/api/policies/%2F/bad", {"pattern": ".*"})
    assert (reply.status, reply.body) == (
        400,
        {"error": "bad_request", "reason": "[{key_missing,definition}]"},
    )
    assert broker.vhosts["/"].policies == {}


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"pattern": ".*", "definition": {}}, "no policy provided"),
        (
            {"pattern": ".*", "definition": {"no-such-key": 1}},
            '[{<<"no-such-key">>,1}] are not recognised policy settings',
        ),
        ({"pattern": ".*", "definition": {"message-ttl": -5}}, "-5 is not a valid message TTL"),
        ({"pattern": ".*", "definition": {"ring-size": 0}}, "0 is not a valid ring size"),
        (
            {"pattern": ".*", "apply-to": "x", "definition": {"max-length": 1}},
            "apply-to 'x' unrecognised; should be one of: 'queues', 'classic_queues',  "
            "'quorum_queues', 'streams', 'exchanges', or 'all'",
        ),
    ],
)
async def test_pol_8_validation_texts(api, broker, body, detail):
    reply = await api.put("/api/policies/%2F/bad", body)
    assert (reply.status, reply.body) == (
        400,
        {"error": "bad_request", "reason": f"Validation failed\n\n{detail}\n"},
    )
    assert broker.vhosts["/"].policies == {}


async def test_pol_8_invalid_pattern(api, broker):
    reply = await api.put(
        "/api/policies/%2F/bad", {"pattern": "(", "definition": {"max-length": 1}}
    )
    assert reply.status == 400
    assert reply.body["reason"].startswith(
        "Validation failed\n\npattern should be regular expression but is invalid: "
    )
    assert broker.vhosts["/"].policies == {}


async def test_api_11_missing_vhost_and_bad_json(api, broker):
    assert (await api.put("/api/policies/nowhere/p", POLICY)).status == 404
    reply = await api.call("PUT", "/api/policies/%2F/p", raw=b"[")
    assert reply.status == 400
    assert broker.vhosts["/"].policies == {}


async def test_api_11_who_may_manage_policies(api, broker, user_api):
    maker = user_api("maker", ["policymaker"], vhosts=("/",))
    manager = user_api("manager", ["management"], vhosts=("/",))
    assert (await maker.put("/api/policies/%2F/p", POLICY)).status == 201
    assert [p["name"] for p in (await maker.get("/api/policies")).body] == ["p"]
    refused = await manager.put("/api/policies/%2F/p2", POLICY)
    assert refused.body == {
        "error": "not_authorized",
        "reason": "User not authorised to access object",
    }
    assert (await manager.get("/api/policies")).status == 401
    operator = await maker.put("/api/operator-policies/%2F/cap", POLICY)
    assert operator.body["reason"] == "Not administrator user"
    assert broker.vhosts["/"].operator_policies == {}
