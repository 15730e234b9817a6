"""Runtime parameters side by side with RabbitMQ 3.10.8 (issue 14: "Parameters").

``/api/parameters`` is a second door onto operator policies and vhost limits, so each test checks
both doors agree. Vhost-scoped parameters live in a vhost private to the test; global
parameters carry the test's prefix and are removed afterwards (the RabbitMQ node is shared).
"""

from collections.abc import Iterator

import pytest
from hutch_demo.management import quote

pytestmark = pytest.mark.rabbitmq

ALL = {"configure": ".*", "write": ".*", "read": ".*"}
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}
POLICY = {"pattern": "^x", "definition": {"max-length": 3}, "priority": 1, "apply-to": "queues"}


@pytest.fixture
def vhost(target) -> Iterator[str]:
    name = target.name("vh")
    assert target.api.put(f"/vhosts/{quote(name)}", {}).status == 201
    yield name
    target.api.delete(f"/vhosts/{quote(name)}")


@pytest.fixture
def global_names(target) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        target.api.delete(f"/global-parameters/{quote(name)}")


def test_operator_policies_are_the_operator_policy_component(target, vhost):
    api, vh = target.api, quote(vhost)
    assert api.get(f"/parameters/operator_policy/{vh}").body == []
    assert api.put(f"/parameters/operator_policy/{vh}/via-params", {"value": POLICY}).status == 201
    assert api.put(f"/parameters/operator_policy/{vh}/via-params", {"value": POLICY}).status == 204
    assert api.get(f"/operator-policies/{vh}/via-params").body == {
        "vhost": vhost,
        "name": "via-params",
        **POLICY,
    }
    other = {"pattern": "^y", "definition": {"message-ttl": 5}}
    assert api.put(f"/operator-policies/{vh}/via-policies", other).status == 201
    listed = {item["name"]: item for item in api.get(f"/parameters/operator_policy/{vh}").body}
    assert listed["via-policies"] == {
        "value": {**other, "priority": 0, "apply-to": "all"},
        "vhost": vhost,
        "component": "operator_policy",
        "name": "via-policies",
    }
    assert api.get(f"/parameters/operator_policy/{vh}/via-params").body["value"] == POLICY
    everything = [item for item in api.get("/parameters").body if item["vhost"] == vhost]
    assert sorted(item["name"] for item in everything) == ["via-params", "via-policies"]
    exported = [
        item for item in api.get("/definitions").body["parameters"] if item["vhost"] == vhost
    ]
    assert sorted(item["name"] for item in exported) == ["via-params", "via-policies"]

    no_priority = api.put(
        f"/parameters/operator_policy/{vh}/p",
        {"value": {"pattern": "^x", "definition": {"max-length": 1}}},
    )
    assert (no_priority.status, no_priority.body["reason"]) == (
        400,
        'Validation failed\n\nKey "priority" not found in p\n',
    )
    assert api.delete(f"/parameters/operator_policy/{vh}/via-params").status == 204
    assert api.get(f"/operator-policies/{vh}/via-params").body == NOT_FOUND
    assert api.delete(f"/parameters/operator_policy/{vh}/via-params").body == NOT_FOUND
    assert api.get(f"/parameters/operator_policy/{vh}/via-params").body == NOT_FOUND


def test_vhost_limits_are_the_vhost_limits_component(target, vhost):
    api, vh = target.api, quote(vhost)
    put = api.put(f"/parameters/vhost-limits/{vh}/limits", {"value": {"max-queues": 5}})
    assert put.status == 201
    assert api.get(f"/vhost-limits/{vh}").body == [{"vhost": vhost, "value": {"max-queues": 5}}]
    assert api.get(f"/parameters/vhost-limits/{vh}/limits").body == {
        "value": {"max-queues": 5},
        "vhost": vhost,
        "component": "vhost-limits",
        "name": "limits",
    }
    assert api.put(f"/vhost-limits/{vh}/max-connections", {"value": 2}).status == 204
    assert api.get(f"/parameters/vhost-limits/{vh}/limits").body["value"] == {
        "max-queues": 5,
        "max-connections": 2,
    }
    # A PUT of the parameter replaces the whole set of limits.
    again = api.put(f"/parameters/vhost-limits/{vh}/limits", {"value": {"max-connections": 1}})
    assert again.status == 204
    assert api.get(f"/vhost-limits/{vh}").body == [
        {"vhost": vhost, "value": {"max-connections": 1}}
    ]

    bad_term = api.put(f"/parameters/vhost-limits/{vh}/limits", {"value": {"max-foo": 5}})
    assert (bad_term.status, bad_term.body["reason"]) == (
        400,  # this path of RabbitMQ's escapes its reason as HTML
        'Validation failed\n\nUnrecognised terms [{&lt;&lt;"max-foo"&gt;&gt;,5}] in limits\n',
    )
    not_object = api.put(f"/parameters/vhost-limits/{vh}/limits", {"value": 5})
    assert (not_object.status, not_object.body["reason"]) == (
        400,
        "Validation failed\n\nlimits not a list 5\n",
    )
    assert api.get(f"/vhost-limits/{vh}").body[0]["value"] == {"max-connections": 1}  # unchanged
    assert api.delete(f"/parameters/vhost-limits/{vh}/limits").status == 204
    assert api.get(f"/vhost-limits/{vh}").body == []
    assert api.delete(f"/parameters/vhost-limits/{vh}/limits").body == NOT_FOUND


def test_unknown_and_reserved_components_and_bad_bodies_are_refused(target, vhost):
    api, vh = target.api, quote(vhost)
    for component in ("foo", "federation-upstream", "shovel"):
        refused = api.put(f"/parameters/{component}/{vh}/x", {"value": {"uri": "amqp://"}})
        assert (refused.status, refused.body["reason"]) == (
            400,
            f"Validation failed\n\ncomponent {component} not found\n",
        )
        assert api.get(f"/parameters/{component}").body == []
    policy = api.put(f"/parameters/policy/{vh}/p", {"value": POLICY})
    assert (policy.status, policy.body["reason"]) == (
        400,
        "policies may not be set using this method",
    )
    no_value = api.put(f"/parameters/vhost-limits/{vh}/limits", {})
    assert (no_value.status, no_value.body["reason"]) == (400, "[{key_missing,value}]")
    missing = api.put(
        f"/parameters/vhost-limits/{quote(target.name('none'))}/limits",
        {"value": {"max-queues": 1}},
    )
    assert (missing.status, missing.body) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )
    assert [item for item in api.get("/parameters").body if item["vhost"] == vhost] == []


def test_global_parameters(target, global_names):
    api = target.api
    name, text = target.name("param"), target.name("text")
    global_names += [name, text]
    assert api.put(f"/global-parameters/{quote(name)}", {"value": {"x": [1, 2]}}).status == 201
    assert api.put(f"/global-parameters/{quote(name)}", {"value": {"x": [3]}}).status == 204
    assert api.put(f"/global-parameters/{quote(text)}", {"value": "words"}).status == 201
    assert api.get(f"/global-parameters/{quote(name)}").body == {"name": name, "value": {"x": [3]}}
    listed = {item["name"]: item["value"] for item in api.get("/global-parameters").body}
    assert listed[name] == {"x": [3]} and listed[text] == "words"
    assert listed["internal_cluster_id"].startswith("rabbitmq-cluster-id-")
    exported = {
        item["name"]: item["value"] for item in api.get("/definitions").body["global_parameters"]
    }
    assert exported[name] == {"x": [3]}
    no_value = api.put(f"/global-parameters/{quote(name)}", {})
    assert (no_value.status, no_value.body["reason"]) == (400, "[{key_missing,value}]")
    assert api.delete(f"/global-parameters/{quote(name)}").status == 204
    assert api.delete(f"/global-parameters/{quote(name)}").body == NOT_FOUND
    assert api.get(f"/global-parameters/{quote(name)}").body == NOT_FOUND


def test_cluster_name_is_a_global_parameter(target, global_names):
    api = target.api
    global_names.append("cluster_name")  # put back as it was: no cluster_name parameter
    assert "cluster_name" not in {item["name"] for item in api.get("/global-parameters").body}
    renamed = target.name("cluster")
    assert api.put("/cluster-name", {"name": renamed}).status == 204
    assert api.get("/cluster-name").body == {"name": renamed}
    assert api.get("/overview").body["cluster_name"] == renamed
    assert api.get("/global-parameters/cluster_name").body == {
        "name": "cluster_name",
        "value": renamed,
    }
    again = target.name("again")
    assert api.put("/global-parameters/cluster_name", {"value": again}).status == 204
    assert api.get("/overview").body["cluster_name"] == again
