"""Unsearchable and invalid policy patterns get a 400 and change nothing (issue "Broker trust",
item 7).

On a real hutch-broker: a backreference, an unbalanced parenthesis, 5,000 nested groups, and an
operator policy's lookahead are refused with RabbitMQ's texts, no policy is stored, and the
broker logs no traceback.

Why a module of its own: it measures nothing, so it runs in the broker level's parallel pass;
the canary beside adversarial patterns is test_matching_cost.py, in the serial pass
(hutch_testing.serial).
"""

import pytest
from hutch_demo.management import quote

# One broker per module, each test in a vhost of its own.
pytestmark = pytest.mark.shared_broker


def test_unsearchable_and_invalid_patterns_get_400_and_change_nothing(hutch_broker, vhost, api):
    replies = {
        pattern: api.put_policy("p", pattern, {"max-length": 1})
        for pattern in (r"(a)\1", "(", "(" * 5000 + ")" * 5000)
    }
    operator_reply = api.put_policy("op", "^(?!tmp)", {"max-length": 1}, operator=True)

    assert {pattern[:8]: reply.status for pattern, reply in replies.items()} == {
        r"(a)\1": 400,
        "(": 400,
        "((((((((": 400,
    }
    assert (
        replies[r"(a)\1"]
        .body["reason"]
        .startswith(
            "Validation failed\n\npattern uses a backreference, which hutch-broker does not support"
        )
    )
    assert (
        replies["("]
        .body["reason"]
        .startswith("Validation failed\n\npattern should be regular expression but is invalid: ")
    )
    assert operator_reply.status == 400
    assert api.get(f"/policies/{quote(vhost)}").body == []
    assert api.get(f"/operator-policies/{quote(vhost)}").body == []
    assert "Traceback" not in hutch_broker.log_tail()
