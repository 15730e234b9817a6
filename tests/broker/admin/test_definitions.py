"""All-or-nothing definitions import and the per-vhost shape (API-12), without HTTP."""

import pytest
from hutch_broker.admin import definitions, errors
from hutch_broker.model.broker import Broker


@pytest.fixture
def populated(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("x", "topic", durable=True)
    vhost.declare_queue("q", durable=True, arguments={"x-max-length": 5}, source="http")
    vhost.bind("x", vhost.queues["q"], "k.#")
    return broker


async def test_api_12_round_trip_into_a_fresh_broker(populated):
    exported = populated.export_definitions()
    fresh = Broker(cluster_name="other")
    await definitions.import_definitions(fresh, exported)
    assert fresh.export_definitions() == exported


async def test_api_12_bad_item_changes_nothing(populated):
    before = populated.export_definitions()
    bad = {
        "queues": [
            {"name": "new.q", "vhost": "/", "durable": True, "arguments": {}},
            {"name": "q", "vhost": "/", "durable": True, "arguments": {"x-max-length": 6}},
        ]
    }
    with pytest.raises(errors.ApiError) as caught:
        await definitions.import_definitions(populated, bad)
    assert caught.value.status == 400
    assert "inequivalent arg 'x-max-length'" in caught.value.body["reason"]
    assert populated.export_definitions() == before


@pytest.mark.parametrize(
    "bad",
    [
        {"queues": [{"vhost": "/"}]},
        {"queues": "nope"},
        {"vhosts": [{"name": "v"}], "queues": [{"name": "q", "vhost": "missing"}]},
        {"policies": [{"vhost": "/", "name": "p", "pattern": "(", "definition": {"a": 1}}]},
        {
            "permissions": [
                {"vhost": "/", "user": "guest", "configure": "(", "write": "", "read": ""}
            ]
        },
    ],
)
async def test_api_12_invalid_documents_are_400_and_change_nothing(populated, bad):
    before = populated.export_definitions()
    with pytest.raises(errors.ApiError):
        await definitions.import_definitions(populated, bad)
    assert populated.export_definitions() == before


def test_api_12_vhost_export_drops_vhost_keys(populated):
    exported = definitions.vhost_export(populated.export_definitions(), "/")
    assert set(exported) == {
        "rabbit_version",
        "rabbitmq_version",
        "product_name",
        "product_version",
        "parameters",
        "policies",
        "queues",
        "exchanges",
        "bindings",
    }
    assert exported["queues"] == [
        {"name": "q", "durable": True, "auto_delete": False, "arguments": {"x-max-length": 5}}
    ]
    assert all("vhost" not in item for item in exported["bindings"])


async def test_api_12_scoped_import_places_items_in_the_vhost(populated):
    populated.add_vhost("other")
    exported = definitions.vhost_export(populated.export_definitions(), "/")
    await definitions.import_definitions(populated, definitions.scoped_to_vhost(exported, "other"))
    other = populated.vhosts["other"]
    assert set(other.queues) == {"q"}
    assert [b.routing_key for b in other.bindings()] == ["k.#"]


async def test_an_import_matches_its_policies_once_per_entity_after_loading(broker):
    """Policies are stored paused and every entity matched once at the end, in slices."""
    document = {
        "policies": [
            {"vhost": "/", "name": f"p{index}", "pattern": f"^q{index}", "apply-to": "queues",
             "definition": {"max-length": index + 1}, "priority": index}
            for index in range(10)
        ],
        "parameters": [
            {"vhost": "/", "component": "operator_policy", "name": "cap",
             "value": {"pattern": "^q", "definition": {"max-length": 3}, "priority": 0}}
        ],
        "queues": [
            {"vhost": "/", "name": f"q{index}-{copy}", "durable": True, "arguments": {}}
            for index in range(10)
            for copy in range(20)
        ],
        "exchanges": [{"vhost": "/", "name": "q1.x", "type": "fanout", "durable": True}],
    }  # fmt: skip
    await definitions.import_definitions(broker, document)

    vhost = broker.vhosts["/"]
    assert not vhost.policies_paused
    assert not vhost.policy_changes
    for index in range(10):
        queue = vhost.queues[f"q{index}-0"]
        assert queue.policy.name == f"p{index}"
        assert queue.operator_policy.name == "cap"
        assert queue.settings.max_length == min(index + 1, 3)
    assert vhost.exchanges["q1.x"].policy_name is None  # apply-to queues
