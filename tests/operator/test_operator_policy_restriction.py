"""An OperatorPolicy on a broker whose operator policies are read-only over HTTP (issue 14).

A Broker's ``spec.additionalConfig`` may set
``management.restrictions.operator_policy_changes.disabled = true``. The operator's own writes
then get 405 from the broker. Decided: the OperatorPolicy is not applied and says why (Ready
False, reason ``OperatorPolicyChangesDisabled``, with the line to remove), rather than a bare
``BrokerRejected 405``. A policy applied before the restriction was added cannot be removed
either: deleting its CR releases the finalizer with a ``DeleteFailed`` warning that names the
restriction, as for any permanent refusal, so the policy left in the broker is never silent.
The broker here is a host process started with that line in its config (on the apiserver tier the operator's rendered config is not run;
tests/broker/admin/test_operator_policy_restriction.py pins the broker side).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hutch_demo.management import Management
from hutch_testing.brokers import HutchBroker

pytestmark = pytest.mark.timeout(120)

BROKER = "locked"
KEY = "management.restrictions.operator_policy_changes.disabled"


@pytest.fixture(scope="module")
def env(
    operator: Any, crds_applied: Any, kit: Any, tmp_path_factory: Any
) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("locked")
    config = Path(work) / "hutch.conf"
    config.write_text(f"{KEY} = false\n")
    broker = HutchBroker(work_dir=work, extra_args=["--config", str(config)]).start()
    namespace = crds_applied.create_namespace()
    kube = kit.Kube(crds_applied, namespace)
    kit.set_broker_address(namespace, BROKER, broker)
    kube.secret(f"{BROKER}-default-user", {"username": "guest", "password": "guest"})
    spec = {"persistence": {"size": "1Gi"}, "additionalConfig": f"{KEY} = true\n"}
    kube.create("Broker", "brokers", BROKER, spec)
    kit.wait_for(
        lambda: kit.ready(kube.get("brokers", BROKER), "Available")[0] == "True", 30, "Available"
    )
    try:
        yield {"kube": kube, "api": Management(broker), "broker": broker, "config": config}
    finally:
        broker.stop()


def test_operator_policy_says_changes_are_disabled(env: dict[str, Any], kit: Any) -> None:
    kube, api = env["kube"], env["api"]
    spec = {"brokerRef": {"name": BROKER}, "pattern": "^q$", "definition": {"max-length": 5}}
    kube.create("OperatorPolicy", "operatorpolicies", "before", spec)
    kit.wait_for(
        lambda: kit.ready(kube.get("operatorpolicies", "before"))[0] == "True", 20, "applied"
    )
    env["config"].write_text(f"{KEY} = true\n")  # the platform team locks it down
    env["broker"].restart()
    kube.create("OperatorPolicy", "operatorpolicies", "cap", spec)

    def refused() -> Any:
        obj = kube.get("operatorpolicies", "cap")
        status, reason = kit.ready(obj)
        return obj if (status, reason) == ("False", "OperatorPolicyChangesDisabled") else None

    obj = kit.wait_for(refused, 20, "Ready False OperatorPolicyChangesDisabled")
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert f"{KEY} = true" in ready["message"]
    assert "spec.additionalConfig" in ready["message"]
    assert [p["name"] for p in api.get("/operator-policies").body] == ["before"]  # cap: never

    # Never applied, so nothing to remove from the broker: the CR goes at once.
    kube.delete("operatorpolicies", "cap")
    kit.wait_for(lambda: kube.get("operatorpolicies", "cap") is None, 20, "the CR deleted")

    # Applied before the lock: the CR goes, the policy stays, and a warning says why.
    kube.delete("operatorpolicies", "before")
    kit.wait_for(lambda: kube.get("operatorpolicies", "before") is None, 20, "the CR deleted")
    kube.wait_reason("before", "DeleteFailed")
    failed = [e for e in kube.events("before") if e.get("reason") == "DeleteFailed"]
    assert failed and KEY in failed[-1]["message"], kube.events("before")
    assert [p["name"] for p in api.get("/operator-policies").body] == ["before"]
