"""Spec → management-API request tables, without broker or cluster.

Contract: docs/contracts/operator.md#layers.
"""

from __future__ import annotations

import pytest
from hutch_operator.models import bindings, exchanges, policies, queues
from hutch_operator.topology import translators

REF = {"brokerRef": {"name": "b"}}


def queue(**spec: object) -> queues.QueueSpec:
    return queues.QueueSpec.model_validate({**REF, **spec})


@pytest.mark.parametrize(
    ("spec", "hutch", "arguments"),
    [
        ({}, True, {}),
        ({"limits": {"ringSize": 1000}}, True, {"x-ring-size": 1000}),
        ({"limits": {"ringSize": 1000}}, False, {"x-max-length": 1000, "x-overflow": "drop-head"}),
        ({"limits": {"ringSize": 10, "maxLength": 4}}, False,
         {"x-max-length": 4, "x-overflow": "drop-head"}),
        ({"limits": {"maxLength": 5, "maxLengthBytes": 9, "overflow": "reject-publish",
                     "messageTtl": 60000, "expires": 1, "deadLetterExchange": "dlx",
                     "deadLetterRoutingKey": "k"}}, True,
         {"x-max-length": 5, "x-max-length-bytes": 9, "x-overflow": "reject-publish",
          "x-message-ttl": 60000, "x-expires": 1, "x-dead-letter-exchange": "dlx",
          "x-dead-letter-routing-key": "k"}),
        ({"arguments": {"x-max-priority": 10}, "singleActiveConsumer": True}, False,
         {"x-max-priority": 10, "x-single-active-consumer": True}),
        ({"type": "quorum"}, False, {"x-queue-type": "quorum"}),
        # hutch-broker runs quorum queues on one replica and single active consumers (issue 14)
        ({"type": "quorum", "arguments": {"x-delivery-limit": 3}}, True,
         {"x-delivery-limit": 3, "x-queue-type": "quorum"}),
        ({"singleActiveConsumer": True}, True, {"x-single-active-consumer": True}),
    ],
)  # fmt: skip
def test_queue_declare(spec, hutch, arguments) -> None:
    request = translators.queue_declare(queue(**spec), "orders", hutch=hutch)
    assert (request.method, request.path) == ("PUT", "/api/queues/%2F/orders")
    assert request.body == {"durable": True, "auto_delete": False, "arguments": arguments}


def test_segments_are_encoded() -> None:
    request = translators.queue_declare(queue(vhost="a/b"), "x y#", hutch=True)
    assert request.path == "/api/queues/a%2Fb/x%20y%23"


def test_in_place_limits_and_delete() -> None:
    spec = queue(limits={"maxLength": 2})
    update = translators.queue_update_limits(spec, "q")
    assert (update.method, update.path, update.body) == (
        "PUT", "/api/queues/%2F/q/arguments", {"arguments": {"x-max-length": 2}},
    )  # fmt: skip
    delete = translators.queue_delete("/", "q", if_empty=True, if_unused=True)
    assert delete.path == "/api/queues/%2F/q?if-empty=true&if-unused=true"
    assert translators.queue_delete("/", "q", if_empty=False, if_unused=False).path.endswith("/q")


def test_queue_differences_split_limits_from_fixed() -> None:
    spec = queue(limits={"maxLength": 2}, arguments={"x-max-priority": 5})
    listed = {"durable": True, "auto_delete": False,
              "arguments": {"x-max-length": 9, "x-max-priority": 5}}  # fmt: skip
    assert translators.queue_differences(spec, listed, hutch=True) == ([], ["x-max-length"])
    listed = {"durable": False, "auto_delete": False, "arguments": {"x-max-length": 2}}
    assert translators.queue_differences(spec, listed, hutch=True) == (
        ["x-max-priority", "durable"], [],
    )  # fmt: skip


def test_queue_stats() -> None:
    listed = {"messages": 4, "messages_ready": 3, "messages_unacknowledged": 1, "consumers": 2,
              "policy": "p", "operator_policy": None, "effective_policy_definition": {"a": 1}}  # fmt: skip
    assert translators.queue_stats(listed) == {
        "messages": 4, "messagesReady": 3, "messagesUnacknowledged": 1, "consumers": 2,
        "policy": "p", "operatorPolicy": None, "effectivePolicyDefinition": {"a": 1},
        "firstOffset": None, "lastOffset": None, "segments": None,  # a stream's (hutch-broker)
    }  # fmt: skip


def test_exchange() -> None:
    spec = exchanges.ExchangeSpec.model_validate({**REF, "type": "topic", "internal": True})
    request = translators.exchange_declare(spec, "events")
    assert request.path == "/api/exchanges/%2F/events"
    assert request.body == {"type": "topic", "durable": True, "auto_delete": False,
                            "internal": True, "arguments": {}}  # fmt: skip
    listed = {**request.body, "arguments": None, "name": "events"}
    assert translators.exchange_differences(spec, listed) == []
    assert translators.exchange_differences(spec, {**listed, "type": "fanout"}) == ["type"]


def test_binding() -> None:
    spec = bindings.BindingSpec.model_validate(
        {
            **REF,
            "source": "ev",
            "destination": "dst",
            "destinationType": "exchange",
            "routingKey": "a.*",
        }
    )
    create = translators.binding_create(spec)
    assert (create.method, create.path) == ("POST", "/api/bindings/%2F/e/ev/e/dst")
    assert create.body == {"routing_key": "a.*", "arguments": {}}
    listed = {"source": "ev", "destination": "dst", "destination_type": "exchange",
              "routing_key": "a.*", "arguments": {}, "properties_key": "a.%2A"}  # fmt: skip
    assert translators.binding_matches(spec, listed)
    assert not translators.binding_matches(spec, {**listed, "routing_key": "b"})
    assert translators.binding_delete(spec, "a.%2A").path == "/api/bindings/%2F/e/ev/e/dst/a.%252A"


JSON_ARGUMENTS = {"x-flag": True, "x-list": [1, "a", False], "x-table": {"k": 2.5}, "x-n": 7}


def test_arguments_keep_their_json_types() -> None:
    """Issue 16 defect 9: boolean, list, table and float arguments reach the broker as written;
    an integer stays an integer (not a float, not a string) and a string stays a string."""
    spec = queue(arguments={**JSON_ARGUMENTS, "x-s": "7"})
    body = translators.queue_declare(spec, "q", hutch=True).body
    assert body["arguments"] == {**JSON_ARGUMENTS, "x-s": "7"}
    kinds = {key: type(value) for key, value in body["arguments"].items()}
    assert kinds == {"x-flag": bool, "x-list": list, "x-table": dict, "x-n": int, "x-s": str}
    binding = bindings.BindingSpec.model_validate(
        {**REF, "source": "h", "destination": "q", "arguments": {"x-match": "all", "on": True}}
    )
    assert translators.binding_create(binding).body["arguments"] == {"x-match": "all", "on": True}
    with pytest.raises(ValueError, match="arguments"):
        queue(arguments={"x-null": None})


def test_a_boolean_argument_is_not_the_integer_one() -> None:
    """``True == 1`` in Python; to the broker they are different arguments, so each comparison
    the sweep makes must see the difference (drift or a mismatch, never "equal")."""
    spec = queue(arguments={"x-flag": True})
    listed = {"durable": True, "auto_delete": False, "arguments": {"x-flag": 1}}
    assert translators.queue_differences(spec, listed, hutch=True) == (["x-flag"], [])
    same = {**listed, "arguments": {"x-flag": True}}
    assert translators.queue_differences(spec, same, hutch=True) == ([], [])
    exchange = exchanges.ExchangeSpec.model_validate({**REF, "arguments": {"x-flag": True}})
    body = translators.exchange_declare(exchange, "e").body
    assert translators.exchange_differences(exchange, body) == []
    assert translators.exchange_differences(exchange, {**body, "arguments": {"x-flag": 1}}) == [
        "arguments"
    ]
    binding = bindings.BindingSpec.model_validate(
        {**REF, "source": "h", "destination": "q", "arguments": {"x-flag": True}}
    )
    listed_binding = {"source": "h", "destination": "q", "destination_type": "queue",
                      "routing_key": "", "arguments": {"x-flag": True}}  # fmt: skip
    assert translators.binding_matches(binding, listed_binding)
    assert not translators.binding_matches(binding, {**listed_binding, "arguments": {"x-flag": 1}})


def test_policies() -> None:
    spec = policies.PolicySpec.model_validate(
        {**REF, "pattern": "^a", "definition": {"max-length": 5}, "priority": 2}
    )
    put = translators.policy_put(spec, "p", operator=False)
    assert put.path == "/api/policies/%2F/p"
    assert put.body == {"pattern": "^a", "apply-to": "all", "definition": {"max-length": 5},
                        "priority": 2}  # fmt: skip
    assert translators.policy_differences(spec, {**put.body, "priority": 1}) == ["priority"]
    op = policies.OperatorPolicySpec.model_validate(
        {**REF, "pattern": ".", "definition": {"max-length": 5}}
    )
    put = translators.policy_put(op, "cap", operator=True)
    assert put.path == "/api/operator-policies/%2F/cap"
    assert put.body["apply-to"] == "queues"
