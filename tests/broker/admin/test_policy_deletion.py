"""Deleting a policymaker's expensive policy leaves its queues without it (case 1's clean-up).

On a real hutch-broker: 40 queues with 255-byte names under the `(.*)` x 240 + `b` policy and a
plain one; once the expensive policy is deleted, only the plain one's queues have a policy.

Why a module of its own: it measures nothing (no clock, no canary), so it runs in the broker
level's parallel pass; the canary beside that policy is test_policy_isolation.py, in the serial
pass (hutch_testing.serial).
"""

import pytest
from hutch_demo import management
from hutch_testing.clients import connect

ATTACK_PATTERN = "(.*)" * 240 + "b"  # as test_policy_isolation.py's attack


def attack_names(prefix: str) -> list[str]:
    return [f"{prefix}{index:03d}-" + "a" * (250 - len(prefix)) + "b" for index in range(40)]


@pytest.mark.timeout(120)
def test_deleting_the_expensive_policy_leaves_the_queues_without_it(hutch_broker):
    admin = management.Management(hutch_broker)
    assert admin.put("/vhosts/tenant-a", {}).ok
    assert admin.put(
        "/permissions/tenant-a/guest", {"configure": ".*", "write": ".*", "read": ".*"}
    ).ok
    channel = connect(hutch_broker, vhost="tenant-a").channel()
    for name in attack_names("q"):
        channel.queue_declare(name)
    body = {"pattern": ATTACK_PATTERN, "definition": {"max-length": 1}, "priority": 1}
    assert admin.put("/policies/tenant-a/slow", body).status == 201
    assert admin.put(
        "/policies/tenant-a/plain", {"pattern": "^q00", "definition": {"max-length": 2}}
    ).ok

    assert admin.delete("/policies/tenant-a/slow").status == 204

    policies = {queue["name"]: queue["policy"] for queue in admin.get("/queues/tenant-a").body}
    assert {name: policy for name, policy in policies.items() if policy} == dict.fromkeys(
        attack_names("q")[:10], "plain"
    )
