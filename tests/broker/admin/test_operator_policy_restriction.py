"""``management.restrictions.operator_policy_changes.disabled = true`` (issue 14).

RabbitMQ 3.11+ lets a platform team make operator policies read-only through the HTTP API (the
limits they impose on tenants must not be lifted by whoever holds an administrator login).
RabbitMQ 3.10.8 has no such key, so this is pinned on hutch-broker alone: the broker runs
with the key in its config file, and every HTTP door to an operator policy refuses a change
with 405 while reads, user policies and definitions files keep working.
"""

import pytest
from hutch_broker import config as config_mod
from hutch_demo.management import Management

OPERATOR_POLICY = {"pattern": "^x", "definition": {"max-length": 3}}


def _broker(hutch_broker_factory, tmp_path, disabled: bool):
    config = tmp_path / "hutch.conf"
    config.write_text(
        f"management.restrictions.operator_policy_changes.disabled = {str(disabled).lower()}\n"
    )
    return Management(hutch_broker_factory(extra_args=["--config", str(config)]))


def test_operator_policies_are_read_only_over_http_when_disabled(hutch_broker_factory, tmp_path):
    api = _broker(hutch_broker_factory, tmp_path, disabled=True)
    # A definitions file (what the operator renders at deploy time) still sets them.
    imported = {
        "parameters": [
            {
                "vhost": "/",
                "component": "operator_policy",
                "name": "platform",
                "value": {**OPERATOR_POLICY, "priority": 0, "apply-to": "queues"},
            }
        ]
    }
    assert api.post("/definitions", imported).status in (201, 204)

    refused = [
        api.put("/operator-policies/%2F/other", OPERATOR_POLICY),
        api.put(
            "/operator-policies/%2F/platform", {**OPERATOR_POLICY, "definition": {"max-length": 9}}
        ),
        api.delete("/operator-policies/%2F/platform"),
        api.put(
            "/parameters/operator_policy/%2F/other",
            {"value": {**OPERATOR_POLICY, "priority": 0}},
        ),
        api.delete("/parameters/operator_policy/%2F/platform"),
    ]
    assert [(r.status, r.body["error"]) for r in refused] == [(405, "Method Not Allowed")] * 5
    assert [p["name"] for p in api.get("/operator-policies").body] == ["platform"]
    assert api.get("/operator-policies/%2F/platform").body["definition"] == {"max-length": 3}
    assert (
        api.put("/policies/%2F/mine", OPERATOR_POLICY).status == 201
    )  # user policies are not restricted


def test_operator_policies_change_freely_by_default(hutch_broker_factory, tmp_path):
    api = _broker(hutch_broker_factory, tmp_path, disabled=False)
    assert api.put("/operator-policies/%2F/p", OPERATOR_POLICY).status == 201
    assert api.delete("/parameters/operator_policy/%2F/p").status == 204


def test_the_key_takes_a_boolean_only():
    key = "management.restrictions.operator_policy_changes.disabled"
    assert config_mod.parse(f"{key} = true").operator_policy_changes_disabled is True
    assert config_mod.parse("").operator_policy_changes_disabled is False
    with pytest.raises(config_mod.ConfigError, match=r"^line 1 \(management\.restrictions"):
        config_mod.parse(f"{key} = maybe")
