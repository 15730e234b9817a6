"""The mission end to end: CRs through the operator into a real broker, checked in the broker.

Each test declares its own objects on the shared Broker ``hutch`` (names carry a random suffix),
waits until the operator reports them Ready, then asserts what the broker does: refuses, lowers,
expires, drops, reports or keeps. Nothing here talks to the broker's model directly.
"""

from __future__ import annotations

import decimal
import json
from typing import Any

import pika
import pytest
from hutch_demo import chain, clusters, waiting
from hutch_testing import clients, steps

pytestmark = pytest.mark.e2e

BROKER = {"name": "hutch"}


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return clusters.cr("Queue", name, {"brokerRef": BROKER, **spec})


def connect(hutch: chain.Chain, name: str = "hutch") -> pika.BlockingConnection:
    endpoint = hutch.brokers[name].endpoint
    return clients.connect(endpoint, user=endpoint.username, password=endpoint.password)


def test_max_length_reject_publish_refuses_the_extra_publish(
    hutch: chain.Chain, unique: str
) -> None:
    name = f"capped-{unique}"
    hutch.apply_topology(
        clusters.manifest(queue(name, limits={"maxLength": 3, "overflow": "reject-publish"}))
    )
    with connect(hutch) as connection:
        channel = steps.confirm_channel(connection)
        outcomes = steps.publish_all(channel, name, [b"1", b"2", b"3", b"4"])
    assert outcomes == [steps.ACK, steps.ACK, steps.ACK, steps.NACK]
    listed = hutch.management().queue(name)
    assert listed["messages"] == 3
    assert listed["arguments"]["x-max-length"] == 3


def test_operator_policy_lowers_a_user_policy_limit(hutch: chain.Chain, unique: str) -> None:
    name = f"lowered-{unique}"
    pattern = f"^{name}$"
    hutch.apply_topology(
        clusters.manifest(
            queue(name),
            clusters.cr(
                "Policy",
                f"high-{unique}",
                {"brokerRef": BROKER, "pattern": pattern, "applyTo": "queues",
                 "priority": 5, "definition": {"max-length": 10}},
            ),
            clusters.cr(
                "OperatorPolicy",
                f"low-{unique}",
                {"brokerRef": BROKER, "pattern": pattern, "priority": 5,
                 "definition": {"max-length": 4}},
            ),
        )
    )  # fmt: skip
    mgmt = hutch.management()
    listed = waiting.wait_for(
        lambda: mgmt.queue(name),
        lambda q: q["operator_policy"] == f"low-{unique}" and q["policy"] == f"high-{unique}",
        timeout=30,
        what="both policies applied",
    )
    assert listed["effective_policy_definition"]["max-length"] == 4
    with connect(hutch) as connection:
        channel = steps.confirm_channel(connection)
        steps.publish_all(channel, name, [str(i).encode() for i in range(1, 9)])
        assert clients.drain(channel, name) == [b"5", b"6", b"7", b"8"]


def test_message_ttl_expires_into_the_dead_letter_queue(hutch: chain.Chain, unique: str) -> None:
    dlx, dead, ttl = f"dlx-{unique}", f"dead-{unique}", f"ttl-{unique}"
    hutch.apply_topology(
        clusters.manifest(
            clusters.cr("Exchange", dlx, {"brokerRef": BROKER, "type": "fanout"}),
            queue(dead),
            clusters.cr("Binding", dead, {"brokerRef": BROKER, "source": dlx, "destination": dead}),
            queue(ttl, limits={"messageTtl": 300, "deadLetterExchange": dlx}),
        )
    )
    with connect(hutch) as connection:
        channel = steps.confirm_channel(connection)
        steps.publish_all(channel, ttl, [b"a", b"b", b"c"])
        mgmt = hutch.management()
        waiting.wait_for(
            lambda: mgmt.queue(dead)["messages"], lambda n: n == 3, timeout=15, what="3 dead"
        )
        assert mgmt.queue(ttl)["messages"] == 0
        method, properties, body = channel.basic_get(dead, auto_ack=True)
    assert method is not None
    assert body == b"a"
    death = properties.headers["x-death"][0]
    assert (death["reason"], death["queue"]) == ("expired", ttl)


def test_ring_queue_keeps_the_newest_n(hutch: chain.Chain, unique: str) -> None:
    name = f"ring-{unique}"
    hutch.apply_topology(clusters.manifest(queue(name, limits={"ringSize": 5})))
    with connect(hutch) as connection:
        channel = steps.confirm_channel(connection)
        steps.publish_all(channel, name, [str(i).encode() for i in range(1, 11)])
        assert clients.drain(channel, name) == [str(i).encode() for i in range(6, 11)]


def _expected_watermark(memory_request: str, relative: str) -> int:
    units = {"Mi": 2**20, "Gi": 2**30}
    number, unit = memory_request[:-2], memory_request[-2:]
    return int(decimal.Decimal(number) * units[unit] * decimal.Decimal(relative))


def test_broker_memory_request_sets_the_reported_watermark(hutch: chain.Chain) -> None:
    # The examples' Broker: request 1Gi at 0.4.
    node = hutch.management().get("/nodes").body[0]
    broker = hutch.wait_broker("Ready", timeout=10)
    assert node["mem_limit"] == _expected_watermark("1Gi", "0.4") == 429_496_729
    assert broker["status"]["memory"]["highWatermarkBytes"] == node["mem_limit"]

    # A second Broker at 512Mi, then grown to 2Gi: the broker follows the request.
    small = "hutch-small"
    spec = {"resources": {"requests": {"memory": "512Mi"}, "limits": {"memory": "512Mi"}},
            "persistence": {"size": "0"}}  # fmt: skip
    hutch.create_broker(clusters.manifest(clusters.cr("Broker", small, spec)), name=small)
    hutch.start_broker(small)
    assert hutch.management(small).get("/nodes").body[0]["mem_limit"] == _expected_watermark(
        "512Mi", "0.4"
    )
    patch = {"spec": {"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "2Gi"}}}}
    hutch.cluster.kubectl(
        "patch", "brokers", small, "-n", hutch.namespace, "--type=merge", "-p", json.dumps(patch)
    )
    rendered = hutch.restart_broker(small)
    assert "vm_memory_high_watermark.absolute = 858993459" in rendered.config
    assert hutch.management(small).get("/nodes").body[0]["mem_limit"] == 858_993_459
    status = waiting.wait_for(
        lambda: hutch.wait_broker("Ready", small, timeout=10)["status"]["memory"],
        lambda memory: memory["highWatermarkBytes"] == 858_993_459,
        timeout=30,
        what="Broker.status.memory follows",
    )
    assert status["basis"] == "Request"


def test_deleting_a_retained_queue_keeps_it_and_its_messages(
    hutch: chain.Chain, unique: str
) -> None:
    kept, gone = f"kept-{unique}", f"gone-{unique}"
    hutch.apply_topology(clusters.manifest(queue(kept, deletionPolicy="retain"), queue(gone)))
    with connect(hutch) as connection:
        channel = steps.confirm_channel(connection)
        steps.publish_all(channel, kept, [b"x"] * 5)
    for name in (kept, gone):
        hutch.cluster.kubectl("delete", "queues", name, "-n", hutch.namespace, "--timeout=60s")
        assert hutch.cluster.get(clusters.cr_path(hutch.namespace, "queues", name)) is None
    mgmt = hutch.management()
    assert mgmt.queue(kept)["messages"] == 5
    assert not mgmt.queue_exists(gone)  # the default policy deletes an empty queue


def test_immutable_fields_are_refused_by_the_apiserver(hutch: chain.Chain, unique: str) -> None:
    name = f"fixed-{unique}"
    hutch.apply_topology(clusters.manifest(queue(name)))
    result = hutch.cluster.kubectl(
        "patch", "queues", name, "-n", hutch.namespace, "--type=merge",
        "-p", json.dumps({"spec": {"durable": False}}), check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "immutable" in result.stderr


def test_the_operator_and_the_broker_run_in_real_containers(hutch: chain.Chain) -> None:
    # What the kubelet reports: a node that is not a kwok fake and the runtime's container IDs
    # (a kwok Pod is Running without either). The operator is the chart's Deployment.
    operator, broker, *_ = hutch.pod_facts()
    assert operator.name.startswith("hutch-operator-")
    assert broker.name == "hutch-server-0"
    for pod in (operator, broker):
        assert pod.node
        assert not pod.node.startswith("kwok-")
        assert all(cid.startswith("containerd://") for _, cid in pod.containers), pod
