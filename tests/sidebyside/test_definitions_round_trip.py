"""RabbitMQ 3.10.8's own definitions exports import into hutch-broker (issue "Broker trust II").

Why: a definitions file is how an installation moves from RabbitMQ to Hutch, so every file
RabbitMQ exports must import. After a vhost's limits are cleared RabbitMQ keeps the
``vhost-limits`` parameter with its empty proplist as the value, ``[]``, and exports it so; that
one item used to fail the whole import with a 400. The vhost-limits parameter is the vhost's
whole set of limits, so an import replaces them, and ``[]`` clears them.
"""

from collections.abc import Iterator

import pytest
from hutch_testing.management import Management, quote

pytestmark = pytest.mark.rabbitmq


def _cleared_limits_item(vhost: str) -> dict[str, object]:
    return {"value": [], "vhost": vhost, "component": "vhost-limits", "name": "limits"}


@pytest.fixture
def vhost(target) -> Iterator[str]:
    name = target.name("vh")
    assert target.api.put(f"/vhosts/{quote(name)}", {}).status == 201
    yield name
    target.api.delete(f"/vhosts/{quote(name)}")


def test_cleared_limits_export_as_an_empty_list_and_import_back(target, vhost):
    api, vh = target.api, quote(vhost)
    assert api.put(f"/vhost-limits/{vh}/max-connections", {"value": 5}).status == 204
    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": 7}).status == 204

    imported = api.post("/definitions", {"parameters": [_cleared_limits_item(vhost)]})

    assert imported.status in (201, 204), imported.body
    assert api.get(f"/vhost-limits/{vh}").body == []


def test_an_imported_limits_parameter_replaces_the_vhost_s_limits(target, vhost):
    api, vh = target.api, quote(vhost)
    assert api.put(f"/vhost-limits/{vh}/max-connections", {"value": 5}).status == 204
    item = {**_cleared_limits_item(vhost), "value": {"max-queues": 3}}

    assert api.post("/definitions", {"parameters": [item]}).status in (201, 204)
    assert api.get(f"/vhost-limits/{vh}").body == [{"vhost": vhost, "value": {"max-queues": 3}}]


def test_the_per_vhost_import_and_the_parameters_api_take_an_empty_list_too(target, vhost):
    api, vh = target.api, quote(vhost)
    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": 7}).status == 204
    per_vhost = {"parameters": [{"value": [], "component": "vhost-limits", "name": "limits"}]}
    assert api.post(f"/definitions/{vh}", per_vhost).status in (201, 204)
    assert api.get(f"/vhost-limits/{vh}").body == []

    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": 7}).status == 204
    put = api.put(f"/parameters/vhost-limits/{vh}/limits", _cleared_limits_item(vhost))
    assert put.status in (201, 204), put.body
    assert api.get(f"/vhost-limits/{vh}").body == []


def test_a_whole_rabbitmq_export_imports_into_hutch(rabbitmq, hutch_broker):
    """The reference node's full export, with a vhost whose limits were set and cleared."""
    reference, hutch = Management(rabbitmq), Management(hutch_broker)
    vhost = "sbs-export-cleared-limits"
    assert reference.put(f"/vhosts/{quote(vhost)}", {}).status in (201, 204)
    try:
        assert reference.put(f"/vhost-limits/{quote(vhost)}/max-queues", {"value": 2}).ok
        assert reference.delete(f"/vhost-limits/{quote(vhost)}/max-queues").ok
        exported = reference.get("/definitions").body
        assert _cleared_limits_item(vhost) in exported["parameters"]

        imported = hutch.post("/definitions", exported)

        assert imported.status in (201, 204), imported.body
        assert hutch.get(f"/vhost-limits/{quote(vhost)}").body == []
        assert vhost in [item["name"] for item in hutch.get("/vhosts").body]
    finally:
        reference.delete(f"/vhosts/{quote(vhost)}")
