"""Queue, Exchange and Binding ``arguments`` are JSON: booleans, lists and tables (issue 16, 9).

The CRDs used to take integers and strings only, so ``x-single-active-consumer: true`` or a
headers Binding on a boolean header could not be written. The same CRs go to hutch-broker and
to RabbitMQ 3.10.8 (both through a ``connectionSecret``), and the proof that the types arrived
is behavioural: a headers Binding on ``urgent: true`` routes a message whose header is the
boolean ``true`` (a ``1`` or ``"true"`` would not match). Then three drift sweeps must find
nothing to correct: Python's ``True == 1`` once hid such differences from the operator.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hutch_demo import management
from hutch_demo.processes import BrokerProcess

pytestmark = pytest.mark.timeout(120)

QUEUE_ARGUMENTS = {"x-single-active-consumer": True, "x-max-priority": 5}
BINDING_ARGUMENTS = {"x-match": "all", "urgent": True, "tags": ["eu", "retail"]}
DRIFT_REASONS = {"DriftCorrected", "DriftDetected", "BrokerMismatch"}
SWEEP_SECONDS = 2.0  # HUTCH_SYNC_PERIOD in tests/operator/conftest.py


def _check_json_arguments(kit: Any, plane: Any, broker: BrokerProcess) -> None:
    kube = kit.Kube(plane, plane.create_namespace())
    kube.secret(
        "conn", {"uri": broker.http_url, "username": broker.username, "password": broker.password}
    )
    ref = {"connectionSecret": {"name": "conn"}}
    suffix = kube.namespace
    queue, exchange = f"json-q-{suffix}", f"json-h-{suffix}"
    kube.create("Queue", "queues", "q", {**ref, "name": queue, "arguments": QUEUE_ARGUMENTS})
    kube.create("Exchange", "exchanges", "h", {**ref, "name": exchange, "type": "headers"})
    binding = {**ref, "source": exchange, "destination": queue, "arguments": BINDING_ARGUMENTS}
    kube.create("Binding", "bindings", "b", binding)
    objects = [("queues", "q"), ("exchanges", "h"), ("bindings", "b")]
    for plural, name in objects:
        kit.wait_for(
            lambda p=plural, n=name: kit.ready(kube.get(p, n)) == ("True", "Declared"), 20, name
        )

    mgmt = management.Management(broker)
    listed = mgmt.get(f"/queues/%2F/{queue}").body["arguments"]
    assert listed == QUEUE_ARGUMENTS
    assert type(listed["x-single-active-consumer"]) is bool
    (found,) = mgmt.get(f"/bindings/%2F/e/{exchange}/q/{queue}").body
    assert found["arguments"] == BINDING_ARGUMENTS

    def publish(headers: dict[str, Any]) -> bool:
        body = {"properties": {"headers": headers}, "routing_key": "", "payload": "x",
                "payload_encoding": "string"}  # fmt: skip
        reply = mgmt.request("POST", f"/exchanges/%2F/{exchange}/publish", body)
        assert reply.status == 200, reply.body
        return bool(reply.body["routed"])

    assert publish({"urgent": True, "tags": ["eu", "retail"]})
    assert not publish({"urgent": 1, "tags": ["eu", "retail"]})
    assert not publish({"urgent": "true", "tags": ["eu", "retail"]})

    time.sleep(3 * SWEEP_SECONDS + 1)
    for plural, name in objects:
        assert kit.ready(kube.get(plural, name)) == ("True", "Declared"), name
        assert not kube.reasons(name) & DRIFT_REASONS, (name, kube.reasons(name))
    for plural, name in reversed(objects):
        kube.delete(plural, name)
    for plural, name in objects:
        kit.wait_for(lambda p=plural, n=name: kube.get(p, n) is None, 20, f"{name} deleted")


def test_json_arguments_on_hutch_broker(
    operator: Any, crds_applied: Any, kit: Any, hutch_broker: BrokerProcess
) -> None:
    _check_json_arguments(kit, crds_applied, hutch_broker)


def test_json_arguments_on_rabbitmq(
    operator: Any, crds_applied: Any, kit: Any, rabbitmq: BrokerProcess
) -> None:
    _check_json_arguments(kit, crds_applied, rabbitmq)
