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


def test_api_12_round_trip_into_a_fresh_broker(populated):
    exported = populated.export_definitions()
    fresh = Broker(cluster_name="other")
    definitions.import_definitions(fresh, exported)
    assert fresh.export_definitions() == exported


def test_api_12_bad_item_changes_nothing(populated):
    before = populated.export_definitions()
    bad = {
        "queues": [
            {"name": "new.q", "vhost": "/", "durable": True, "arguments": {}},
            {"name": "q", "vhost": "/", "durable": True, "arguments": {"x-max-length": 6}},
        ]
    }
    with pytest.raises(errors.ApiError) as caught:
        definitions.import_definitions(populated, bad)
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
def test_api_12_invalid_documents_are_400_and_change_nothing(populated, bad):
    before = populated.export_definitions()
    with pytest.raises(errors.ApiError):
        definitions.import_definitions(populated, bad)
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


def test_api_12_scoped_import_places_items_in_the_vhost(populated):
    populated.add_vhost("other")
    exported = definitions.vhost_export(populated.export_definitions(), "/")
    definitions.import_definitions(populated, definitions.scoped_to_vhost(exported, "other"))
    other = populated.vhosts["other"]
    assert set(other.queues) == {"q"}
    assert [b.routing_key for b in other.bindings()] == ["k.#"]
