"""Stream Queues in the operator, without broker or cluster (issue 28, part 2).

Contract: docs/contracts/operator.md#stream-queues. The model refuses what RabbitMQ 3.10.8
refuses for a stream, with the CRD's messages (the CRD's CEL rules are run by a real apiserver
in tests/crds/test_stream_crd_validation.py); the translators turn the retention fields into
the stream arguments on every broker, Hutch included; the stats carry hutch-broker's offsets.
"""

from __future__ import annotations

import re
from typing import Any

import pydantic
import pytest
from hutch_operator import crdgen
from hutch_operator.core import errors
from hutch_operator.models import kinds, policies, queues, streams
from hutch_operator.topology import reconciling, translators
from hutch_operator.topology.handlers import queues as queue_handlers

REF = {"brokerRef": {"name": "b"}}
RETENTION = {"type": "stream", "limits": {"maxLengthBytes": 20_000_000_000},
             "stream": {"maxAge": "7D", "maxSegmentSizeBytes": 100_000_000}}  # fmt: skip


def queue(**spec: Any) -> queues.QueueSpec:
    return queues.QueueSpec.model_validate({**REF, **spec})


@pytest.mark.parametrize("hutch", [True, False], ids=["hutch", "elsewhere"])
def test_a_stream_is_declared_with_its_retention_arguments(hutch: bool) -> None:
    """hutch-broker has streams now: the same declare on every broker (it was InvalidSpec)."""
    request = translators.queue_declare(queue(**RETENTION), "events", hutch=hutch)
    assert (request.method, request.path) == ("PUT", "/api/queues/%2F/events")
    assert request.body == {
        "durable": True,
        "auto_delete": False,
        "arguments": {
            "x-queue-type": "stream",
            "x-max-length-bytes": 20_000_000_000,
            "x-max-age": "7D",
            "x-stream-max-segment-size-bytes": 100_000_000,
        },
    }
    bare = translators.queue_declare(queue(type="stream"), "events", hutch=hutch)
    assert bare.body["arguments"] == {"x-queue-type": "stream"}


def test_size_retention_changes_in_place_and_age_is_fixed() -> None:
    """limits.maxLengthBytes is a limit (Hutch changes it in place); x-max-age is not."""
    spec = queue(**RETENTION)
    listed = {"durable": True, "auto_delete": False,
              "arguments": translators.queue_arguments(spec, hutch=True)}  # fmt: skip
    assert translators.queue_differences(spec, listed, hutch=True) == ([], [])
    smaller = {**listed, "arguments": {**listed["arguments"], "x-max-length-bytes": 5}}
    assert translators.queue_differences(spec, smaller, hutch=True) == ([], ["x-max-length-bytes"])
    older = {**listed, "arguments": {**listed["arguments"], "x-max-age": "1D"}}
    assert translators.queue_differences(spec, older, hutch=True) == (["x-max-age"], [])
    update = translators.queue_update_limits(spec, "events")
    assert update.body == {"arguments": {"x-max-length-bytes": 20_000_000_000}}


def test_stream_stats_carry_the_offsets() -> None:
    """hutch-broker's stream item has first_offset, last_offset (null while empty) and
    segments; they land in status as written, and the sweep's listing asks for them."""
    item = {"messages": 10, "messages_ready": 10, "messages_unacknowledged": 0, "consumers": 1,
            "policy": "keep", "operator_policy": None,
            "effective_policy_definition": {"max-age": "1D"}, "type": "stream",
            "first_offset": 4, "last_offset": 13, "next_offset": 14, "segments": 3}  # fmt: skip
    stats = translators.queue_stats(item)
    assert (stats["firstOffset"], stats["lastOffset"], stats["segments"]) == (4, 13, 3)
    assert stats["messages"] == 10
    empty = translators.queue_stats({**item, "messages": 0, "first_offset": 0, "last_offset": None})
    assert (empty["firstOffset"], empty["lastOffset"]) == (0, None)
    # RabbitMQ 3.10.8's stream item has no offsets: they stay null.
    rabbit = {
        key: value for key, value in item.items() if "offset" not in key and key != "segments"
    }
    stats = translators.queue_stats(rabbit)
    assert (stats["firstOffset"], stats["lastOffset"], stats["segments"]) == (None, None, None)
    columns = translators.queue_list("/").path.split("columns=")[1].split(",")
    assert {"first_offset", "last_offset", "segments"} <= set(columns)


def test_a_stream_hutch_just_created_has_known_offsets() -> None:
    """The create's status write carries a new stream's offsets on hutch-broker, without a read
    (the sweep's first pass would otherwise fill them up to a period later)."""
    assert translators.fresh_queue_stats(hutch_stream=True) == {
        "messages": 0, "messagesReady": 0, "messagesUnacknowledged": 0, "consumers": 0,
        "firstOffset": 0, "lastOffset": None, "segments": 0,
    }  # fmt: skip
    assert "firstOffset" not in translators.fresh_queue_stats()  # elsewhere, or not a stream


def test_offsets_are_wide_columns() -> None:
    columns = {c.name: c for c in kinds.QUEUE.columns}
    assert columns["First Offset"].json_path == ".status.firstOffset"
    assert columns["Last Offset"].json_path == ".status.lastOffset"
    assert columns["First Offset"].priority == columns["Last Offset"].priority == 1
    assert columns["Type"].json_path == ".spec.type"
    status = crdgen.crd(kinds.QUEUE)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fields = status["properties"]["status"]["properties"]
    assert {fields[key]["type"] for key in ("firstOffset", "lastOffset", "segments")} == {"integer"}


LIMIT_HINT = "retention is limits.maxLengthBytes and stream.maxAge"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "stream", "durable": False}, streams.DURABLE_MESSAGE),
        ({"type": "stream", "autoDelete": True}, streams.AUTO_DELETE_MESSAGE),
        ({"type": "stream", "limits": {"maxLength": 10}},
         "type: stream refuses limits.maxLength (x-max-length), as RabbitMQ does; a stream"),
        ({"type": "stream", "limits": {"messageTtl": 10}}, "limits.messageTtl (x-message-ttl)"),
        ({"type": "stream", "limits": {"overflow": "drop-head"}}, "limits.overflow"),
        ({"type": "stream", "limits": {"expires": 1000}}, "limits.expires (x-expires)"),
        ({"type": "stream", "limits": {"deadLetterExchange": "dlx"}}, "limits.deadLetterExchange"),
        ({"type": "stream", "limits": {"deadLetterRoutingKey": "k"}}, "deadLetterRoutingKey"),
        ({"type": "stream", "limits": {"ringSize": 5}}, "ringSize (x-ring-size): a ring is a"),
        ({"type": "stream", "singleActiveConsumer": True},
         "refuses singleActiveConsumer (x-single-active-consumer)"),
        ({"type": "stream", "arguments": {"x-single-active-consumer": True}},
         "(x-single-active-consumer)"),
        ({"type": "stream", "arguments": {"x-max-priority": 5}},
         "type: stream refuses argument x-max-priority, as RabbitMQ does"),
        ({"type": "stream", "arguments": {"x-message-ttl": 5}}, "messageTtl (x-message-ttl)"),
        ({"type": "stream", "arguments": {"x-queue-mode": "lazy"}}, "argument x-queue-mode"),
        ({"type": "stream", "arguments": {"x-delivery-limit": 2}}, "argument x-delivery-limit"),
        ({"type": "stream", "arguments": {"x-max-age": "7 days"}}, "x-max-age in arguments is a"),
        ({"type": "stream", "arguments": {"x-max-age": 7}}, "x-max-age in arguments is a"),
        ({"type": "stream", "stream": {"maxAge": "1D"}, "arguments": {"x-max-age": "1D"}},
         "stream.maxAge must not also appear in arguments (x-max-age)"),
        ({"stream": {"maxAge": "1D"}}, streams.ONLY_STREAMS_MESSAGE),
        ({"type": "quorum", "stream": {"maxSegmentSizeBytes": 10}}, streams.ONLY_STREAMS_MESSAGE),
        ({"type": "stream", "stream": {"maxAge": "0D"}}, "maxAge is a positive number and one unit"),
        ({"type": "stream", "stream": {"maxAge": "7d"}}, "maxAge is a positive number"),
        ({"type": "stream", "stream": {"maxAge": "1h30m"}}, "maxAge is a positive number"),
        ({"type": "stream", "stream": {"maxAge": "D"}}, "maxAge is a positive number"),
        ({"type": "stream", "stream": {"maxSegmentSizeBytes": 0}}, "greater than or equal to 1"),
    ],
)  # fmt: skip
def test_what_a_stream_refuses(spec: dict[str, Any], message: str) -> None:
    """The model refuses what the CRD refuses (an object admitted by an older CRD is InvalidSpec
    before any broker call), with the same messages."""
    with pytest.raises(pydantic.ValidationError, match=re.escape(message)):
        queue(**spec)
    with pytest.raises(errors.SpecError, match="invalid spec"):
        reconciling.parse(queue_handlers.OPS, {**REF, **spec})


@pytest.mark.parametrize(
    "spec",
    [
        RETENTION,
        {"type": "stream"},
        {"type": "stream", "arguments": {"x-max-age": "12h", "x-initial-cluster-size": 1}},
        {"type": "stream", "stream": {"maxAge": "007D"}},
        {"type": "stream", "stream": {"maxAge": "10s"}, "deleteIfEmpty": False},
        {"type": "stream", "limits": {"maxLengthBytes": 0}},
        # Other types keep their limits and arguments.
        {"limits": {"maxLength": 3, "messageTtl": 5}, "arguments": {"x-max-priority": 5}},
        {"type": "quorum", "arguments": {"x-delivery-limit": 3}, "singleActiveConsumer": True},
    ],
)
def test_what_a_stream_accepts(spec: dict[str, Any]) -> None:
    """Streams with their own arguments pass, and so do other types with theirs."""
    parsed = queue(**spec)
    assert parsed.stream.model_dump(exclude_none=True, by_alias=True) == spec.get("stream", {})
    arguments = translators.queue_declare(parsed, "q", hutch=True).body["arguments"]
    assert arguments.get("x-queue-type") == spec.get("type")


def test_every_refused_argument_is_in_the_one_crd_rule() -> None:
    """One CEL rule for every argument RabbitMQ refuses on a stream (the apiserver runs each
    rule on every write, status PATCHes included), whose message expression names each one;
    each on a declared property (CEL sees only typed properties of a free-form object), typed
    as RabbitMQ takes the argument."""
    schema = crdgen.crd(kinds.QUEUE)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    refusing = [rule for rule in spec["x-kubernetes-validations"] if "messageExpression" in rule]
    assert len(refusing) == 1
    rule, expression = refusing[0]["rule"], refusing[0]["messageExpression"]
    known = spec["properties"]["arguments"]["properties"]
    for argument, field in streams.REFUSED_ARGUMENTS.items():
        assert argument.replace("-", "__dash__") in rule, argument
        label = streams.refusal_message(argument, field).removeprefix("type: stream refuses ")
        assert label.split(",")[0].split(":")[0] in expression, argument
        assert argument in known, argument
    assert known["x-single-active-consumer"] == {"type": "boolean"}  # as RabbitMQ takes it
    immutable = spec["properties"]["stream"]["x-kubernetes-validations"]
    assert immutable == [
        {"rule": "self == oldSelf", "message": streams.IMMUTABLE_MESSAGE,
         "reason": "FieldValueForbidden"}
    ]  # fmt: skip


def policy(kind: type[Any], definition: dict[str, Any], **spec: Any) -> Any:
    return kind.model_validate({**REF, "pattern": "^events", "definition": definition, **spec})


def test_policies_set_stream_retention() -> None:
    spec = policy(policies.PolicySpec, {"max-age": "1D", "stream-max-segment-size-bytes": 1000,
                                        "max-length-bytes": 10_000}, applyTo="streams")  # fmt: skip
    body = translators.policy_put(spec, "keep", operator=False).body
    assert body["apply-to"] == "streams"
    assert body["definition"] == {
        "max-age": "1D",
        "stream-max-segment-size-bytes": 1000,
        "max-length-bytes": 10_000,
    }
    for definition, message in [
        ({"max-age": "1 day"}, policies.MAX_AGE_POLICY_MESSAGE),
        ({"max-age": 86400}, policies.MAX_AGE_POLICY_MESSAGE),
        ({"max-age": "0s"}, policies.MAX_AGE_POLICY_MESSAGE),
        ({"stream-max-segment-size-bytes": "1MB"}, policies.SEGMENT_POLICY_MESSAGE),
        ({"stream-max-segment-size-bytes": 0}, policies.SEGMENT_POLICY_MESSAGE),
    ]:
        with pytest.raises(pydantic.ValidationError, match=message[:40]):
            policy(policies.PolicySpec, definition)


def test_operator_policies_refuse_stream_keys_and_cap_size() -> None:
    """RabbitMQ 3.10.8 has no max-age or stream-max-segment-size-bytes operator-policy keys:
    refused with a message that says where they go; max-length-bytes caps a stream."""
    capped = policy(policies.OperatorPolicySpec, {"max-length-bytes": 10_000}, applyTo="streams")
    assert translators.policy_put(capped, "cap", operator=True).body["apply-to"] == "streams"
    for definition in ({"max-age": "1D"}, {"stream-max-segment-size-bytes": 1000}):
        with pytest.raises(pydantic.ValidationError, match="not operator-policy keys"):
            policy(policies.OperatorPolicySpec, definition)
    for definition in ({"overflow": "drop-head"}, {"target-group-size": 3}):
        # target-group-size: 3.10.8 and hutch-broker refuse it as not recognised (400).
        with pytest.raises(pydantic.ValidationError, match="operator policies accept only"):
            policy(policies.OperatorPolicySpec, definition)
