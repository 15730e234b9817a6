"""Pure views against a model built in memory: shapes and values without HTTP."""

from types import SimpleNamespace

import pytest
from hutch_broker.admin.views import bindings, exchanges, overview, queues, users, vhosts
from hutch_broker.dispatch.context import Stats
from hutch_broker.dispatch.unacked import Unacked
from hutch_broker.model import policies
from hutch_broker.model.messages import Message
from hutch_broker.model.queues import Consumer
from hutch_broker.protocol import properties
from hutch_testing.targets import OneAtATime

NODE = "hutch@localhost"


def _policy(name, pattern, definition, *, priority=0, operator=False):
    policy, detail = policies.validate(
        {"pattern": pattern, "definition": definition, "priority": priority, "apply-to": "queues"},
        operator=operator,
    )
    assert policy is not None, detail
    policy.vhost, policy.name = "/", name
    return policy


@pytest.fixture
def vhost(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("mgmt.ae", "fanout", durable=True)
    vhost.declare_exchange(
        "mgmt.x", "topic", durable=True, arguments={"alternate-exchange": "mgmt.ae"}
    )
    vhost.declare_queue(
        "mgmt.q",
        durable=True,
        arguments={"x-max-length": 10, "x-message-ttl": 60000, "x-overflow": "reject-publish"},
        source="http",
    )
    vhost.declare_queue("mgmt.q2", durable=True, source="http")
    vhost.bind("mgmt.x", vhost.queues["mgmt.q"], "a.*", {"x-foo": "bar"})
    vhost.bind("mgmt.ae", vhost.queues["mgmt.q2"], "")
    vhost.set_policy(
        _policy("mgmt.pol", "^mgmt\\.q$", {"max-length": 5, "message-ttl": 30000}, priority=1),
        operator=False,
    )
    vhost.set_policy(
        _policy("mgmt.op", "^mgmt\\.", {"expires": 3600000, "max-length": 3}, operator=True),
        operator=True,
    )
    raw = properties.encode_properties(delivery_mode=2, headers={"h": 1})
    vhost.queues["mgmt.q"].publish(Message("", "mgmt.q", raw, b"hello"), 1000)
    return vhost


# -- properties_key (API-10) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("routing_key", "arguments", "expected"),
    [
        ("", {}, "~"),
        ("mgmt.q", {}, "mgmt.q"),
        ("a.*", {}, "a.%2A"),
        ("~", {}, "%7E"),
        ("a b/c", {}, "a%20b%2Fc"),
    ],
)
def test_api_10_properties_key_without_arguments(routing_key, arguments, expected):
    assert bindings.properties_key(routing_key, arguments) == expected


def test_api_10_properties_key_with_arguments_hashes_them():
    key = bindings.properties_key("a.*", {"x-foo": "bar"})
    prefix, _, digest = key.partition("~")
    assert prefix == "a.%2A"
    assert len(digest) == 6
    assert digest.replace("-", "").replace("_", "").isalnum()
    assert key == bindings.properties_key("a.*", {"x-foo": "bar"})
    assert key != bindings.properties_key("a.*", {"x-foo": "baz"})
    assert bindings.properties_key("", {"x-foo": "bar"}).startswith("~")


def test_api_10_key_matches_once_decoded_form():
    assert bindings.key_matches("a.%2A~abcdef", "a.%2A~abcdef")
    assert bindings.key_matches("a.*~abcdef", "a.%2A~abcdef")
    assert not bindings.key_matches("a.b~abcdef", "a.%2A~abcdef")


def test_api_10_vhost_bindings_default_ones_first(vhost, reference):
    items = bindings.vhost_bindings(vhost)
    expected = [
        item for item in reference("GET_bindings__2F.json") if item["destination"] != "bench.q"
    ]
    assert [item["source"] for item in items] == ["", "", "mgmt.ae", "mgmt.x"]
    for mine, theirs in zip(items, expected, strict=True):
        assert list(mine) == list(theirs)
        if not theirs["arguments"]:
            assert mine == theirs
        else:
            assert {**mine, "properties_key": None} == {**theirs, "properties_key": None}


def test_api_10_queue_bindings_match_reference(vhost, reference):
    items = bindings.queue_bindings(vhost.queues["mgmt.q"], "/")
    expected = reference("GET_queues__2F_mgmt.q_bindings.json")
    assert [item["source"] for item in items] == [item["source"] for item in expected]
    assert items[0] == expected[0]


# -- queues (API-7) ------------------------------------------------------------------------


def test_api_7_queue_detail_keys_match_reference(vhost, reference, erlang_only):
    item = queues.queue_detail(vhost.queues["mgmt.q"], node=NODE, local_address="127.0.0.1:5672")
    expected = reference("GET_queues__2F_mgmt.q.json")
    assert set(item) == set(expected) - erlang_only


def test_api_7_queue_item_values(vhost):
    item = queues.queue_item(vhost.queues["mgmt.q"], node=NODE)
    assert item["messages"] == item["messages_ready"] == 1
    assert item["messages_unacknowledged"] == 0
    assert item["message_bytes"] == item["message_bytes_ready"] == 5
    assert item["messages_persistent"] == 1
    assert item["policy"] == "mgmt.pol"
    assert item["operator_policy"] == "mgmt.op"
    # POL-6: the merged policies, without the queue's own arguments.
    assert item["effective_policy_definition"] == {
        "expires": 3600000,
        "max-length": 3,
        "message-ttl": 30000,
    }
    assert item["arguments"]["x-max-length"] == 10
    assert item["idle_since"].endswith("+00:00")


def test_api_7_no_policy_gives_empty_definition(broker):
    queue, _ = broker.vhosts["/"].declare_queue("plain")
    item = queues.queue_item(queue, node=NODE)
    assert item["effective_policy_definition"] == {}
    assert item["policy"] is None
    assert item["operator_policy"] is None


class FakeChannel(OneAtATime):
    def __init__(self, session, number):
        self.session = session
        self.number = number
        self.delivered = []
        self.flow_active = True
        self.consumer_prefetch = self.prefetch_count = 0
        self.confirm_mode = self.transactional = False
        self.consumers = {}
        self.unacked = Unacked()

    def has_capacity(self, consumer):
        return True

    def deliver(self, consumer, queue, entry):
        self.delivered.append(entry.message.body)

    def cancelled_by_broker(self, consumer):
        pass


def test_api_7_consumer_details(vhost, broker):
    session = SimpleNamespace(
        peer_host="127.0.0.1", peer_port=40000, user=broker.users["guest"], vhost=vhost,
        local_address=None, tls=None,
    )  # fmt: skip
    queue = vhost.queues["mgmt.q2"]
    queue.add_consumer(
        Consumer("ctag", queue, FakeChannel(session, 3), no_ack=False, exclusive=True, prefetch=7)
    )
    item = queues.queue_detail(queue, node=NODE, local_address="127.0.0.1:5672")
    (consumer,) = item["consumer_details"]
    assert consumer["consumer_tag"] == "ctag"
    assert consumer["prefetch_count"] == 7
    assert consumer["channel_details"]["name"] == "127.0.0.1:40000 -> 127.0.0.1:5672 (3)"
    assert consumer["channel_details"]["user"] == "guest"
    assert item["exclusive_consumer_tag"] == "ctag"
    assert item["consumers"] == 1
    assert "idle_since" in item  # as on 3.10.8 with an idle consumer (test_rabbitmqadmin)


# -- exchanges, vhosts, users, overview ------------------------------------------------------


def test_api_5_exchange_detail_keys(vhost, reference):
    item = exchanges.exchange_detail(vhost.exchanges["mgmt.x"])
    assert set(item) == set(reference("GET_exchanges__2F_mgmt.x.json"))
    vhost.exchanges["mgmt.x"].stats_publish_in += 1
    busy = exchanges.exchange_detail(vhost.exchanges["mgmt.x"])
    assert set(busy) == set(reference("GET_exchanges__2F_amq.default.json"))
    assert busy["message_stats"]["publish_in"] == 1
    assert item["arguments"] == {"alternate-exchange": "mgmt.ae"}
    assert exchanges.exchange_item(vhost.exchanges[""])["name"] == ""
    assert exchanges.exchange_item(vhost.exchanges[""])["user_who_performed_action"] == (
        "rmq-internal"
    )


def test_api_3_vhost_item_matches_reference(broker, reference):
    vhost, _ = broker.add_vhost("mgmt-vh", description="test vhost", tags=["a", "b"])
    item = vhosts.vhost_item(vhost, node=NODE)
    expected = reference("GET_vhosts_mgmt-vh.json")
    assert list(item) == list(expected)
    assert item["metadata"] == expected["metadata"]
    assert item["tags"] == ["a", "b"]


def test_api_3_vhost_list_item_keys(vhost, reference):
    item = vhosts.vhost_list_item(vhost, node=NODE)
    assert set(item) == set(reference("GET_vhosts.json")[0])
    assert item["messages"] == 1


def test_api_4_users_and_whoami(broker, reference):
    guest = broker.users["guest"]
    assert users.whoami(guest) == reference("GET_whoami.json")
    assert set(users.user_item(guest)) == set(reference("GET_definitions.json")["users"][0])


def test_api_1_overview_keys_match_reference(broker, reference):
    item = overview.overview(
        cluster_name=NODE,
        vhosts=broker.vhosts.values(),
        stats=Stats(),
        connections=0,
        channels=0,
        info=overview.NodeInfo(),
    )
    expected = reference("GET_overview.json")
    assert set(item) == set(expected)
    assert set(item["message_stats"]) == set(expected["message_stats"])
    assert set(item["churn_rates"]) == set(expected["churn_rates"])
    assert set(item["object_totals"]) == set(expected["object_totals"])
    assert item["product_name"] == "Hutch"
    assert item["rabbitmq_version"] == "4.0.0"
    assert item["object_totals"]["exchanges"] == 7


def test_api_2_node_keys_match_reference(reference):
    sample = overview.NodeSample(
        now_ms=10_000, mem_used=5, mem_limit=10, mem_alarm=False, disk_free=10**9
    )
    item = overview.node(NODE, overview.NodeInfo(started_at_ms=4_000), sample)
    assert set(item) == set(reference("GET_nodes.json")[0])
    assert item["uptime"] == 6_000
    assert (item["mem_used"], item["mem_limit"], item["mem_alarm"]) == (5, 10, False)
