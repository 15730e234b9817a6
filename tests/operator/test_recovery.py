"""Honest conditions and prompt recovery on a real kube-apiserver and hutch-broker.

Each test starts its own operator as a child process (as test_tenancy.py does) with the
settings its defect needs: a sweep every few seconds (defect 6: a listing taken before the
operator's own write to an object must not judge that object), or no sweep at all
(defect 8: recovery must come from the Broker turning Available, not from a tick). Broker writes
are counted from the operator's own ``hutch_broker_requests_total`` metric.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import management, ports
from hutch_testing.brokers import HutchBroker

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
BROKER = "hutch"
WRITES = re.compile(r'^hutch_broker_requests_total\{[^}]*method="(PUT|POST|DELETE)"[^}]*\} (\S+)$')


@contextlib.contextmanager
def operator(plane: Any, kube: Any, broker: HutchBroker, log: Path, **env: str) -> Iterator[int]:
    """The operator as a child process; yields its metrics port."""
    port = ports.free_port()
    environment = {
        **os.environ, "KUBECONFIG": str(plane.kubeconfig), "HUTCH_BROKER_STATUS_PERIOD": "1",
        "HUTCH_DELETE_TIMEOUT": "6", "HUTCH_METRICS_PORT": str(port),
        "HUTCH_BROKER_ADDRESSES": f"{kube.namespace}/{BROKER}={broker.http_url}|{broker.amqp_url}",
        "PYTHONPATH": str(REPO / "operator"), **env,
    }  # fmt: skip
    with log.open("ab") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "hutch_operator", "--standalone", "--all-namespaces"],
            env=environment, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield port
    finally:
        child.terminate()
        try:
            child.wait(20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def writes(port: int) -> float:
    """PUT, POST and DELETE requests the operator sent to brokers so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(float(m.group(2)) for line in text.splitlines() if (m := WRITES.match(line)))


@pytest.fixture
def setup(crds_applied: Any, kit: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    plane = crds_applied
    broker = HutchBroker(work_dir=tmp_path / "hutch").start()
    kube = kit.Kube(plane, plane.create_namespace())
    kube.secret(f"{BROKER}-default-user", {"username": "guest", "password": "guest"})
    kube.create("Broker", "brokers", BROKER, {"persistence": {"size": "0"}})
    try:
        yield {"plane": plane, "kube": kube, "broker": broker, "log": tmp_path / "operator.log"}
    finally:
        broker.stop()


def _available(kit: Any, kube: Any, want: str) -> None:
    kit.wait_for(lambda: kit.ready(kube.get("brokers", BROKER), "Available")[0] == want,
                 60, f"Broker Available={want}")  # fmt: skip


def _settled(kit: Any, kube: Any, plural: str, name: str, timeout: float = 30) -> Any:
    """Ready=True Declared for the object's current generation."""

    def check() -> Any:
        obj = kube.get(plural, name) or {}
        status = obj.get("status", {})
        current = status.get("observedGeneration") == obj["metadata"].get("generation")
        return obj if current and kit.ready(obj) == ("True", "Declared") else None

    return kit.wait_for(check, timeout, f"{plural}/{name} Declared")


def test_own_changes_are_not_drift(setup: dict[str, Any], kit: Any) -> None:
    """Defect 6: after a user's change the sweep sees the operator's write, not a stale listing:
    no DriftCorrected event and no second write."""
    kube, ref = setup["kube"], {"brokerRef": {"name": BROKER}}
    policy = {**ref, "name": "lazy", "pattern": "^orders$", "definition": {"max-length": 100}}
    settings = {"HUTCH_SYNC_PERIOD": "2"}
    with operator(setup["plane"], kube, setup["broker"], setup["log"], **settings) as port:
        _available(kit, kube, "True")
        kube.create("Queue", "queues", "orders", {**ref, "limits": {"maxLength": 20}})
        kube.create("Policy", "policies", "lazy", policy)
        _settled(kit, kube, "queues", "orders")
        _settled(kit, kube, "policies", "lazy")
        time.sleep(4.5)  # every object was swept: a pass may hold a listing from before the edits

        kube.patch_spec("queues", "orders", {"limits": {"maxLength": 5}})
        kube.patch_spec("policies", "lazy", {"definition": {"max-length": 50}})
        kube.create("Queue", "queues", "fresh", ref)
        for plural, name in (("queues", "orders"), ("policies", "lazy"), ("queues", "fresh")):
            _settled(kit, kube, plural, name)
        time.sleep(1)  # the last write's metric and status land
        before = writes(port)
        time.sleep(6.5)  # three sweep periods
        after = writes(port)

    for name in ("orders", "lazy", "fresh"):
        assert "DriftCorrected" not in kube.reasons(name), kube.events(name)
    assert after == before


def test_objects_recover_when_the_broker_is_available_again(
    setup: dict[str, Any], kit: Any
) -> None:
    """Defect 8: objects a sweep tick found waiting for their Broker are reconciled as soon as
    the Broker is Available again, not at their next tick (20 s here, 300 s by default)."""
    kube, broker, ref = setup["kube"], setup["broker"], {"brokerRef": {"name": BROKER}}
    policy = {**ref, "name": "capped", "pattern": "^q", "definition": {"max-length": 100}}
    objects = (("queues", "q1"), ("policies", "capped"))
    waiting = {("False", "BrokerNotReady"), ("False", "BrokerUnavailable")}
    with operator(setup["plane"], kube, broker, setup["log"], HUTCH_SYNC_PERIOD="20"):
        _available(kit, kube, "True")
        kube.create("Queue", "queues", "q1", ref)
        kube.create("Policy", "policies", "capped", policy)
        for plural, name in objects:
            _settled(kit, kube, plural, name)

        broker.stop(keep_files=True)
        for plural, name in objects:  # each one's own tick finds the broker gone
            kit.wait_for(lambda p=plural, n=name: kit.ready(kube.get(p, n)) in waiting,
                         30, f"{name} waiting for the broker")  # fmt: skip
        # The later tick was just now: without a wake-up, its object waits 20 s for the next.
        broker.start()
        started = time.monotonic()
        for plural, name in objects:
            _settled(kit, kube, plural, name, timeout=max(0.5, 8 - (time.monotonic() - started)))


def test_blocked_delete_says_so_and_its_orphans_are_cleaned(
    setup: dict[str, Any], kit: Any
) -> None:
    """Defect 7: a delete blocked by an unreachable broker turns Ready=False DeleteBlocked with
    a Warning at once; what it abandons is listed on the Broker and deleted when it answers."""
    kube, broker, ref = setup["kube"], setup["broker"], {"brokerRef": {"name": BROKER}}
    policy = {**ref, "name": "gone-policy", "pattern": "^x$", "definition": {"max-length": 1}}
    objects = (("queues", "gone-queue", "Queue"), ("policies", "gone-policy", "Policy"))
    mgmt = management.Management(broker)
    with operator(setup["plane"], kube, broker, setup["log"], HUTCH_SYNC_PERIOD="0"):
        _available(kit, kube, "True")
        kube.create("Queue", "queues", "gone-queue", ref)
        kube.create("Policy", "policies", "gone-policy", policy)
        for plural, name, _ in objects:
            _settled(kit, kube, plural, name)

        broker.stop(keep_files=True)
        for plural, name, _ in objects:
            kube.delete(plural, name)
        for plural, name, _ in objects:
            obj = kit.wait_for(
                lambda p=plural, n=name: (o := kube.get(p, n))
                and kit.ready(o) == ("False", "DeleteBlocked") and o,
                5, f"{name} DeleteBlocked",
            )  # fmt: skip
            assert "not deleted yet" in obj["status"]["conditions"][0]["message"]
            kube.wait_reason(name, "DeleteBlocked")
        for plural, name, _ in objects:  # released after HUTCH_DELETE_TIMEOUT (6 s)
            kit.wait_for(lambda p=plural, n=name: kube.get(p, n) is None, 30, f"{name} gone")
        listed = kube.get("brokers", BROKER)["status"].get("abandoned") or []
        assert {(i["kind"], i["name"], i["vhost"], i["object"]) for i in listed} == {
            ("Queue", "gone-queue", "/", "gone-queue"),
            ("Policy", "gone-policy", "/", "gone-policy"),
        }

        broker.start()
        assert mgmt.request("GET", "/queues/%2F/gone-queue").status == 200  # still there
        kit.wait_for(
            lambda: not (kube.get("brokers", BROKER)["status"].get("abandoned") or []),
            15, "abandoned cleaned",
        )  # fmt: skip
        assert mgmt.request("GET", "/queues/%2F/gone-queue").status == 404
        assert mgmt.request("GET", "/policies/%2F/gone-policy").status == 404
        kube.wait_reason(BROKER, "AbandonedCleaned")


def test_smaller_honesty(setup: dict[str, Any], kit: Any) -> None:
    """Defect 9: DependencyNotFound names the missing end; one Warning for an immutable
    mismatch; Queue stats are in status when it is first Declared."""
    kube, broker, ref = setup["kube"], setup["broker"], {"brokerRef": {"name": BROKER}}
    mgmt = management.Management(broker)
    with operator(setup["plane"], kube, broker, setup["log"], HUTCH_SYNC_PERIOD="2"):
        _available(kit, kube, "True")
        kube.create("Queue", "queues", "dq", ref)
        obj = _settled(kit, kube, "queues", "dq")
        assert (obj["status"].get("messages"), obj["status"].get("consumers")) == (0, 0)

        kube.create("Binding", "bindings", "b", {**ref, "source": "nosrc", "destination": "dq"})
        obj = kit.wait_for(
            lambda: (o := kube.get("bindings", "b")) and kit.ready(o)[1] == "DependencyNotFound"
            and o, 30, "DependencyNotFound",
        )  # fmt: skip
        message = obj["status"]["conditions"][0]["message"]
        assert "source exchange 'nosrc' not found" in message and "dq" not in message, message

        kube.create("Exchange", "exchanges", "mx", {**ref, "type": "topic"})
        _settled(kit, kube, "exchanges", "mx")
        assert mgmt.request("DELETE", "/exchanges/%2F/mx").status == 204
        body = {"type": "direct", "durable": True, "auto_delete": False, "arguments": {}}
        assert mgmt.request("PUT", "/exchanges/%2F/mx", body).status in (201, 204)
        kit.wait_for(lambda: kit.ready(kube.get("exchanges", "mx")) == ("False", "BrokerMismatch"),
                     30, "BrokerMismatch")  # fmt: skip
        time.sleep(5)  # more ticks see the same mismatch
        assert kit.ready(kube.get("exchanges", "mx")) == ("False", "BrokerMismatch")
        assert mgmt.request("DELETE", "/exchanges/%2F/mx").status == 204
        assert mgmt.request("PUT", "/exchanges/%2F/mx", {**body, "type": "topic"}).status in (
            201,
            204,
        )
        _settled(kit, kube, "exchanges", "mx")  # put right by hand: Ready again
    reasons = [event["reason"] for event in kube.events("mx") if event["type"] == "Warning"]
    assert reasons == ["BrokerMismatch"], reasons
