"""Stream Queue CRs reconciled into a real hutch-broker and into RabbitMQ 3.10.8 (issue 28, 2).

The operator runs in-process and reaches each broker through a ``connectionSecret``. On both, a
``type: stream`` Queue with its retention fields becomes a stream with the retention arguments,
messages published with pika are read back from ``first`` with their ``x-stream-offset``, and
the drift sweep finds nothing to correct. On hutch-broker the Queue's status carries the stream's
first and last offsets and its segment count (what a reader plans with), a lower
``limits.maxLengthBytes`` is applied in place and drops the oldest segments (``firstOffset``
moves), and a Policy's ``max-age`` applies to the stream; on RabbitMQ 3.10.8, which reports no
offsets, they stay null and the same change is ``ArgumentsImmutable``, pointing to Policy.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hutch_demo import management
from hutch_demo.processes import BrokerProcess
from hutch_testing import clients

pytestmark = pytest.mark.timeout(180)

SWEEP_SECONDS = 2.0  # HUTCH_SYNC_PERIOD in tests/operator/conftest.py
DRIFT_REASONS = {"DriftCorrected", "DriftDetected", "BrokerMismatch"}
COUNT = 40
BODY = b"x" * 100
SEGMENT_BYTES = 2000  # a few records a segment, so retention has segments to drop


def _setup(
    kit: Any, plane: Any, broker: BrokerProcess, **stream: Any
) -> tuple[Any, str, dict[str, Any]]:
    """A stream Queue through a connectionSecret: (kube, broker queue name, the object as
    first seen Declared)."""
    kube = kit.Kube(plane, plane.create_namespace())
    kube.secret(
        "conn", {"uri": broker.http_url, "username": broker.username, "password": broker.password}
    )
    name = f"events-{kube.namespace}"
    spec = {
        "connectionSecret": {"name": "conn"},
        "name": name,
        "type": "stream",
        "limits": {"maxLengthBytes": 1_000_000},
        "stream": {"maxAge": "7D", "maxSegmentSizeBytes": SEGMENT_BYTES, **stream},
    }
    kube.create("Queue", "queues", "events", spec)
    declared = kit.wait_for(
        lambda: (o := kube.get("queues", "events")) and kit.ready(o) == ("True", "Declared") and o,
        20,
        "stream Declared",
    )
    return kube, name, declared


def _publish(broker: BrokerProcess, queue: str, count: int) -> None:
    connection = clients.connect(broker)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for _ in range(count):
            channel.basic_publish("", queue, BODY, mandatory=True)
    finally:
        connection.close()


def _offsets_from_first(broker: BrokerProcess, queue: str, count: int) -> list[int]:
    """The ``x-stream-offset`` of the first ``count`` messages a consumer reads from first."""
    connection = clients.connect(broker)
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=count)
        offsets: list[int] = []
        for method, properties, _ in channel.consume(
            queue, arguments={"x-stream-offset": "first"}, inactivity_timeout=10
        ):
            assert method is not None, f"only {len(offsets)} deliveries"
            offsets.append(properties.headers["x-stream-offset"])
            channel.basic_ack(method.delivery_tag)
            if len(offsets) == count:
                break
        channel.cancel()
        return offsets
    finally:
        connection.close()


def _item(broker: BrokerProcess, queue: str) -> dict[str, Any]:
    reply = management.Management(broker).get(f"/queues/%2F/{queue}")
    assert reply.status == 200, reply.body
    return dict(reply.body)


def _status(kube: Any) -> dict[str, Any]:
    return dict(kube.get("queues", "events")["status"])


def _release(kit: Any, kube: Any, *objects: tuple[str, str]) -> None:
    """Deletes the CRs (a stream holding messages is kept in the broker: deleteIfEmpty)."""
    for plural, name in objects:
        kube.delete(plural, name)
    for plural, name in objects:
        kit.wait_for(lambda p=plural, n=name: kube.get(p, n) is None, 20, f"{name} deleted")


def _no_drift(kit: Any, kube: Any) -> None:
    time.sleep(3 * SWEEP_SECONDS + 1)
    assert kit.ready(kube.get("queues", "events")) == ("True", "Declared")
    assert not kube.reasons("events") & DRIFT_REASONS, kube.reasons("events")


def test_stream_queue_on_hutch_broker(
    operator: Any, crds_applied: Any, kit: Any, hutch_broker: BrokerProcess
) -> None:
    broker = hutch_broker
    kube, name, _ = _setup(kit, crds_applied, broker)
    item = _item(broker, name)
    assert (item["type"], item["durable"], item["auto_delete"]) == ("stream", True, False)
    assert item["arguments"] == {
        "x-queue-type": "stream",
        "x-max-length-bytes": 1_000_000,
        "x-max-age": "7D",
        "x-stream-max-segment-size-bytes": SEGMENT_BYTES,
    }

    _publish(broker, name, COUNT)
    status = kit.wait_for(
        lambda: (s := _status(kube)).get("lastOffset") == COUNT - 1 and s, 20, "offsets in status"
    )
    assert status["firstOffset"] == 0 and status["messages"] == COUNT
    assert status["segments"] > 1, status  # several segments of SEGMENT_BYTES
    assert status["segments"] == _item(broker, name)["segments"]
    assert _offsets_from_first(broker, name, COUNT) == list(range(COUNT))
    wide = kube.plane.kubectl("-n", kube.namespace, "get", "queues.hutch.dev", "events",
                              "-o", "wide").stdout.splitlines()  # fmt: skip
    columns = [column.strip() for column in wide[0].split("  ") if column.strip()]
    assert columns[-4:] == ["TYPE", "FIRST OFFSET", "LAST OFFSET", "AGE"], wide
    assert wide[1].split()[-4:-1] == ["stream", "0", str(COUNT - 1)], wide
    _no_drift(kit, kube)

    # Size retention is a limit: lowered in place (no re-declare, the stream and its offsets
    # stay), and the next append drops the oldest whole segments.
    assert kube.patch_spec("queues", "events", {"limits": {"maxLengthBytes": 1000}}).returncode == 0
    kit.wait_for(
        lambda: (
            _status(kube).get("observedGeneration") == 2
            and kit.ready(kube.get("queues", "events")) == ("True", "Declared")
        ),
        20,
        "generation 2 Declared",
    )
    assert _item(broker, name)["arguments"]["x-max-length-bytes"] == 1000
    _publish(broker, name, 1)
    status = kit.wait_for(
        lambda: (s := _status(kube)).get("lastOffset") == COUNT and s["firstOffset"] > 0 and s,
        20,
        "first offset moved by retention",
    )
    item = _item(broker, name)
    assert (status["firstOffset"], status["segments"]) == (item["first_offset"], item["segments"])
    assert status["messages"] == COUNT + 1 - status["firstOffset"]
    first = status["firstOffset"]
    assert _offsets_from_first(broker, name, COUNT + 1 - first) == list(range(first, COUNT + 1))

    # A Policy sets a stream's retention key and applies to streams.
    keep = {"connectionSecret": {"name": "conn"}, "pattern": f"^{name}$", "applyTo": "streams",
            "definition": {"max-age": "1D"}}  # fmt: skip
    kube.create("Policy", "policies", "keep", keep)
    status = kit.wait_for(
        lambda: (s := _status(kube)).get("policy") == "keep" and s, 20, "policy in status"
    )
    assert status["effectivePolicyDefinition"] == {"max-age": "1D"}
    _no_drift(kit, kube)
    _release(kit, kube, ("policies", "keep"), ("queues", "events"))
    assert _item(broker, name)["messages"] > 0  # kept: deleteIfEmpty
    kube.wait_reason("events", "DeleteSkippedNotEmpty")


def test_stream_queue_on_rabbitmq(
    operator: Any, crds_applied: Any, kit: Any, rabbitmq: BrokerProcess
) -> None:
    broker = rabbitmq
    kube, name, declared = _setup(kit, crds_applied, broker, maxSegmentSizeBytes=1_000_000)
    try:
        assert "firstOffset" not in declared["status"]  # RabbitMQ has no offsets to report
        item = _item(broker, name)
        assert (item["type"], item["durable"], item["auto_delete"]) == ("stream", True, False)
        assert item["arguments"] == {
            "x-queue-type": "stream",
            "x-max-length-bytes": 1_000_000,
            "x-max-age": "7D",
            "x-stream-max-segment-size-bytes": 1_000_000,
        }
        _publish(broker, name, COUNT)
        assert _offsets_from_first(broker, name, COUNT) == list(range(COUNT))
        _no_drift(kit, kube)
        status = _status(kube)  # 3.10.8 reports no offsets: they stay null
        assert "firstOffset" not in status and "lastOffset" not in status, status
        assert "segments" not in status, status

        kube.patch_spec("queues", "events", {"limits": {"maxLengthBytes": 1000}})
        obj = kit.wait_for(
            lambda: (
                (o := kube.get("queues", "events"))
                and kit.ready(o) == ("False", "ArgumentsImmutable")
                and o
            ),
            20,
            "ArgumentsImmutable",
        )
        assert "Policy" in obj["status"]["conditions"][0]["message"]
        assert _item(broker, name)["arguments"]["x-max-length-bytes"] == 1_000_000
    finally:  # the reference node is the session's: leave it as found
        kube.patch_spec("queues", "events", {"deletionPolicy": "retain"})
        _release(kit, kube, ("queues", "events"))
        management.Management(broker).delete(f"/queues/%2F/{name}")


def test_an_empty_stream_has_no_last_offset(
    operator: Any, crds_applied: Any, kit: Any, hutch_broker: BrokerProcess
) -> None:
    """An empty stream: firstOffset 0, no segment and lastOffset null (nothing to read yet),
    as the management item says, in status from the create's Declared write on (the create made
    the stream, so they are known without a read); the first message then takes offset 0."""
    broker = hutch_broker
    kube, name, declared = _setup(kit, crds_applied, broker)
    status = declared["status"]
    assert (status.get("firstOffset"), status.get("segments"), status["messages"]) == (0, 0, 0)
    assert status.get("lastOffset") is None
    item = _item(broker, name)
    assert (item["first_offset"], item["segments"], item["last_offset"]) == (0, 0, None)
    time.sleep(2 * SWEEP_SECONDS)  # a sweep reads the same
    assert _status(kube).get("firstOffset") == 0 and _status(kube).get("lastOffset") is None
    _publish(broker, name, 1)
    kit.wait_for(lambda: _status(kube).get("lastOffset") == 0, 20, "first message's offset")
    _release(kit, kube, ("queues", "events"))
