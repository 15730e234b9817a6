"""Stream Queues, Policies and OperatorPolicies in a real kube-apiserver (issue 28, part 2).

What RabbitMQ refuses for a stream is refused at admission with the CRD's message, before
anything is stored; a stream's fixed retention (``stream``) is immutable with a message that
points to a Policy, while its size retention (``limits.maxLengthBytes``) may change like any
limit. The same rules in the model are tested in tests/operator/test_stream_queues.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hutch_operator.models import policies, streams

REPO = Path(__file__).resolve().parents[2]
REF = {"brokerRef": {"name": "b"}}
PLURALS = {"Queue": "queues", "Policy": "policies", "OperatorPolicy": "operatorpolicies"}


@pytest.fixture(scope="module")
def plane(apiserver: Any) -> Any:
    apiserver.apply_crds(REPO / "crds")
    return apiserver


def _create(plane: Any, ns: str, kind: str, spec: dict[str, Any], name: str) -> tuple[int, Any]:
    body = {"apiVersion": "hutch.dev/v1alpha1", "kind": kind, "metadata": {"name": name},
            "spec": {**REF, **spec}}  # fmt: skip
    return plane.api("POST", f"/apis/hutch.dev/v1alpha1/namespaces/{ns}/{PLURALS[kind]}", body)


def _patch(plane: Any, ns: str, plural: str, name: str, spec: dict[str, Any]) -> Any:
    return plane.kubectl("-n", ns, "patch", f"{plural}.hutch.dev", name, "--type=merge",
                         "-p", json.dumps({"spec": spec}), check=False)  # fmt: skip


STREAM = {"type": "stream"}
REFUSED = [
    ({**STREAM, "durable": False}, streams.DURABLE_MESSAGE),
    ({**STREAM, "autoDelete": True}, streams.AUTO_DELETE_MESSAGE),
    ({**STREAM, "limits": {"maxLength": 10}},
     "type: stream refuses limits.maxLength (x-max-length), as RabbitMQ does; a stream keeps its "
     "messages: retention is limits.maxLengthBytes and stream.maxAge"),
    ({**STREAM, "limits": {"messageTtl": 10}}, "refuses limits.messageTtl (x-message-ttl)"),
    ({**STREAM, "limits": {"overflow": "reject-publish"}}, "refuses limits.overflow (x-overflow)"),
    ({**STREAM, "limits": {"expires": 1000}}, "refuses limits.expires (x-expires)"),
    ({**STREAM, "limits": {"deadLetterExchange": "dlx"}}, "refuses limits.deadLetterExchange"),
    ({**STREAM, "limits": {"ringSize": 5}}, "refuses limits.ringSize (x-ring-size)"),
    ({**STREAM, "singleActiveConsumer": True}, "refuses singleActiveConsumer"),
    ({**STREAM, "arguments": {"x-single-active-consumer": True}}, "(x-single-active-consumer)"),
    ({**STREAM, "arguments": {"x-max-priority": 5}}, "refuses argument x-max-priority"),
    ({**STREAM, "arguments": {"x-queue-mode": "lazy"}}, "refuses argument x-queue-mode"),
    ({**STREAM, "arguments": {"x-dead-letter-exchange": "d"}}, "(x-dead-letter-exchange)"),
    ({**STREAM, "stream": {"maxAge": "7 days"}}, "maxAge is a positive number and one unit"),
    ({**STREAM, "stream": {"maxAge": "0D"}}, "maxAge is a positive number and one unit"),
    ({**STREAM, "stream": {"maxSegmentSizeBytes": 0}}, "spec.stream.maxSegmentSizeBytes"),
    ({**STREAM, "stream": {"maxAge": "1D"}, "arguments": {"x-max-age": "1D"}},
     "stream.maxAge must not also appear in arguments"),
    ({"stream": {"maxAge": "1D"}}, streams.ONLY_STREAMS_MESSAGE),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "message"), REFUSED)
def test_what_a_stream_refuses_is_refused_at_admission(
    plane: Any, spec: dict[str, Any], message: str
) -> None:
    ns = plane.create_namespace()
    status, reply = _create(plane, ns, "Queue", spec, "s")
    assert status == 422, reply
    assert message in reply["message"], reply["message"]


def test_a_stream_is_admitted_and_its_fixed_retention_is_immutable(plane: Any) -> None:
    ns = plane.create_namespace()
    spec = {**STREAM, "limits": {"maxLengthBytes": 1_000_000},
            "stream": {"maxAge": "7D", "maxSegmentSizeBytes": 100_000}}  # fmt: skip
    status, queue = _create(plane, ns, "Queue", spec, "events")
    assert status == 201, queue
    assert queue["spec"]["stream"] == {"maxAge": "7D", "maxSegmentSizeBytes": 100_000}
    # Arguments of its own type pass, in arguments too; a classic queue's stream block is {}.
    args = {**STREAM, "arguments": {"x-max-age": "12h", "x-stream-max-segment-size-bytes": 9}}
    assert _create(plane, ns, "Queue", args, "by-arguments")[0] == 201
    status, classic = _create(plane, ns, "Queue", {"limits": {"maxLength": 5}}, "classic")
    assert status == 201 and classic["spec"]["stream"] == {}, classic

    for change in ({"maxAge": "1D"}, {"maxSegmentSizeBytes": 200_000}, {"maxAge": None}):
        refused = _patch(plane, ns, "queues", "events", {"stream": change})
        assert refused.returncode != 0, change
        assert "stream is immutable: RabbitMQ fixes x-max-age" in refused.stderr, refused.stderr
        assert "with a Policy that matches it (max-age" in refused.stderr
    # Size retention is a limit: it may change (Hutch applies it in place).
    ok = _patch(plane, ns, "queues", "events", {"limits": {"maxLengthBytes": 500_000}})
    assert ok.returncode == 0, ok.stderr
    # A limit streams refuse cannot be added later either.
    refused = _patch(plane, ns, "queues", "events", {"limits": {"messageTtl": 5}})
    assert "refuses limits.messageTtl" in refused.stderr, refused.stderr
    # A classic queue cannot grow stream settings (nor become a stream: type is immutable).
    refused = _patch(plane, ns, "queues", "classic", {"stream": {"maxAge": "1D"}})
    assert refused.returncode != 0 and "stream is immutable" in refused.stderr


def test_policies_take_stream_retention_and_operator_policies_do_not(plane: Any) -> None:
    ns = plane.create_namespace()
    keep = {"pattern": "^events", "applyTo": "streams",
            "definition": {"max-age": "1D", "stream-max-segment-size-bytes": 1000}}  # fmt: skip
    status, reply = _create(plane, ns, "Policy", keep, "keep")
    assert status == 201, reply
    assert reply["spec"]["definition"] == keep["definition"]
    for index, definition in enumerate(({"max-age": "1 day"}, {"max-age": "0h"})):
        spec = {"pattern": ".", "definition": definition}
        status, reply = _create(plane, ns, "Policy", spec, f"bad-age-{index}")
        assert status == 422 and policies.MAX_AGE_POLICY_MESSAGE in reply["message"], reply
    spec = {"pattern": ".", "definition": {"stream-max-segment-size-bytes": -1}}
    status, reply = _create(plane, ns, "Policy", spec, "bad-size")
    assert status == 422 and "stream-max-segment-size-bytes" in reply["message"], reply
    refused = _patch(plane, ns, "policies", "keep", {"definition": {"max-age": "forever"}})
    assert policies.MAX_AGE_POLICY_MESSAGE in refused.stderr, refused.stderr

    cap = {"pattern": "^events", "applyTo": "streams", "definition": {"max-length-bytes": 5000}}
    assert _create(plane, ns, "OperatorPolicy", cap, "cap")[0] == 201
    for index, definition in enumerate(({"max-age": "1D"}, {"stream-max-segment-size-bytes": 9})):
        spec = {"pattern": ".", "definition": definition}
        status, reply = _create(plane, ns, "OperatorPolicy", spec, f"op-{index}")
        assert status == 422, reply
        assert policies.OPERATOR_STREAM_MESSAGE in reply["message"], reply["message"]
