"""The CRDs in a real kube-apiserver: defaults, refusals with readable messages, CEL on update."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hutch_operator.models import bindings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plane(apiserver: Any) -> Any:
    apiserver.apply_crds(REPO / "crds")
    return apiserver


def _create(
    plane: Any, ns: str, kind: str, spec: dict[str, Any], name: str = "x"
) -> tuple[int, Any]:
    plural = {"OperatorPolicy": "operatorpolicies", "Policy": "policies"}.get(
        kind, kind.lower() + "s"
    )
    body = {
        "apiVersion": "hutch.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }
    return plane.api("POST", f"/apis/hutch.dev/v1alpha1/namespaces/{ns}/{plural}", body)


REF = {"brokerRef": {"name": "b"}}


@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [
        ("Queue", {}, "exactly one of brokerRef and connectionSecret"),
        ("Queue", {**REF, "connectionSecret": {"name": "s"}}, "exactly one of brokerRef"),
        ("Queue", {**REF, "type": "lazy"}, "spec.type: Unsupported value"),
        ("Queue", {**REF, "type": "quorum", "durable": False}, "quorum queues are durable"),
        ("Queue", {**REF, "name": "amq.x"}, "names starting with amq. are reserved"),
        ("Queue", {**REF, "limits": {"maxLength": -1}}, "spec.limits.maxLength"),
        ("Queue", {**REF, "limits": {"maxLength": 1}, "arguments": {"x-max-length": 2}},
         "must not also appear in arguments"),
        ("Queue", {**REF, "name": "é" * 200}, "must be at most 255 bytes in UTF-8"),
        ("Exchange", {**REF, "name": "é" * 128}, "must be at most 255 bytes in UTF-8"),
        ("Binding", {**REF, "source": "x", "destination": "é" * 128}, "at most 255 bytes"),
        ("Policy", {**REF, "name": "é" * 128, "pattern": ".", "definition": {"a": 1}},
         "at most 255 bytes"),
        ("Exchange", {**REF, "type": "weird"}, "spec.type"),
        ("Binding", {**REF, "source": "", "destination": "q"}, "spec.source"),
        ("Policy", {**REF, "pattern": ".", "definition": {}}, "spec.definition"),
        ("OperatorPolicy", {**REF, "pattern": ".", "definition": {"overflow": "drop-head"}},
         "operator policies accept only"),
        ("OperatorPolicy", {**REF, "pattern": ".", "definition": {"target-group-size": 3}},
         "operator policies accept only"),
        ("Broker", {"replicas": 3}, "spec.replicas"),
        ("Broker", {"memoryHighWatermark": 0}, "spec.memoryHighWatermark"),
        ("Broker", {"service": {"type": "Ingress"}}, "spec.service.type"),
    ],
)  # fmt: skip
def test_invalid_objects_are_refused(
    plane: Any, kind: str, spec: dict[str, Any], message: str
) -> None:
    ns = plane.create_namespace()
    status, reply = _create(plane, ns, kind, spec)
    assert status == 422, reply
    assert message in reply["message"], reply["message"]


def test_names_count_bytes_not_characters(plane: Any) -> None:
    """255 bytes pass whatever the characters; 256 bytes of 2-byte characters do not."""
    ns = plane.create_namespace()
    for index, name in enumerate(["q" * 255, "é" * 127 + "q", "€" * 85]):
        status, reply = _create(plane, ns, "Queue", {**REF, "name": name}, f"q{index}")
        assert status == 201, reply
    status, reply = _create(plane, ns, "Queue", {**REF, "name": "é" * 128}, "too-long")
    assert status == 422 and "spec.name" in reply["message"], reply


def test_routing_keys_count_bytes_like_names(plane: Any) -> None:
    """Issue 31 item 3: a routing key is a shortstr too. One of 256 bytes was admitted and then
    BrokerRejected; now the apiserver refuses it, counting bytes as for names."""
    ns = plane.create_namespace()
    binding = {**REF, "source": "x", "destination": "q"}
    for index, key in enumerate(["k" * 255, "é" * 127 + "k", "€" * 85, ""]):
        status, reply = _create(plane, ns, "Binding", {**binding, "routingKey": key}, f"b{index}")
        assert status == 201, reply
    for index, key in enumerate(["é" * 128, "k" * 256, "€" * 86]):
        status, reply = _create(plane, ns, "Binding", {**binding, "routingKey": key}, f"r{index}")
        assert status == 422 and "spec.routingKey" in reply["message"], reply
    assert "at most 255 bytes in UTF-8 (a routing key" in reply["message"], reply


def test_the_operator_refuses_the_same_routing_keys() -> None:
    """The operator's model counts bytes too, so an object admitted by an older CRD is
    refused with a SpecError instead of a broker round trip."""
    spec = {**REF, "source": "x", "destination": "q"}
    assert bindings.BindingSpec.model_validate({**spec, "routingKey": "é" * 127 + "k"})
    with pytest.raises(pydantic.ValidationError, match="at most 255 bytes in UTF-8, not 256"):
        bindings.BindingSpec.model_validate({**spec, "routingKey": "é" * 128})


def test_defaults_and_immutability(plane: Any) -> None:
    ns = plane.create_namespace()
    status, queue = _create(plane, ns, "Queue", REF, "q")
    assert status == 201
    spec = queue["spec"]
    assert (spec["vhost"], spec["type"], spec["durable"], spec["deleteIfEmpty"]) == (
        "/",
        "classic",
        True,
        True,
    )
    assert spec["deletionPolicy"] == "delete" and spec["limits"] == {} and spec["arguments"] == {}

    def patch(spec: dict[str, Any]) -> Any:
        return plane.kubectl("-n", ns, "patch", "queues.hutch.dev", "q", "--type=merge",
                             "-p", json.dumps({"spec": spec}), check=False)  # fmt: skip

    for change, field in [({"durable": False}, "durable"), ({"vhost": "v"}, "vhost"),
                          ({"arguments": {"x-a": 1}}, "arguments"), ({"name": "other"}, "name"),
                          ({"brokerRef": {"name": "c"}}, "brokerRef")]:  # fmt: skip
        result = patch(change)
        assert result.returncode != 0 and f"{field} is immutable" in result.stderr, field
    ok = patch({"limits": {"maxLength": 5}, "deletionPolicy": "retain", "deleteIfEmpty": False})
    assert ok.returncode == 0, ok.stderr

    status, broker = _create(plane, ns, "Broker", {}, "b")
    assert status == 201
    assert broker["spec"]["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"memory": "512Mi"},
    }
    assert broker["spec"]["persistence"] == {"size": "1Gi"}
    refused = plane.kubectl("-n", ns, "patch", "brokers.hutch.dev", "b", "--type=merge",
                            "-p", '{"spec":{"persistence":{"storageClassName":"fast"}}}',
                            check=False)  # fmt: skip
    assert "storageClassName is immutable" in refused.stderr
    listed = plane.kubectl("get", "hutch", "-n", ns, "-o", "name").stdout.split()
    assert sorted(listed) == ["broker.hutch.dev/b", "queue.hutch.dev/q"]


@pytest.mark.parametrize("kind", ["Queue", "Exchange"])
def test_reserved_metadata_name_is_refused_without_spec_name(plane: Any, kind: str) -> None:
    """Issue 16 defect 9: metadata.name is the broker name when spec.name is unset."""
    ns = plane.create_namespace()
    status, reply = _create(plane, ns, kind, REF, "amq.orders")
    assert status == 422 and "amq. are reserved" in reply["message"], reply
    status, reply = _create(plane, ns, kind, {**REF, "name": "orders"}, "amq.orders")
    assert status == 201, reply


def test_arguments_take_any_json_and_stay_immutable(plane: Any) -> None:
    """Issue 16 defect 9: boolean, list, table and float arguments are kept as written, and
    immutability compares types (``true`` is not ``1``)."""
    ns = plane.create_namespace()
    arguments = {"x-single-active-consumer": True, "x-list": ["a", 1, False],
                 "x-table": {"k": "v"}, "x-float": 0.5, "x-int": 3}  # fmt: skip
    status, queue = _create(plane, ns, "Queue", {**REF, "arguments": arguments}, "q")
    assert status == 201, queue
    assert queue["spec"]["arguments"] == arguments
    assert type(queue["spec"]["arguments"]["x-single-active-consumer"]) is bool
    status, binding = _create(
        plane, ns, "Binding", {**REF, "source": "h", "destination": "q",
                               "arguments": {"x-match": "any", "on": True}}, "b",
    )  # fmt: skip
    assert status == 201, binding
    changed = {**arguments, "x-int": "3"}
    result = plane.kubectl("-n", ns, "patch", "queues.hutch.dev", "q", "--type=merge",
                           "-p", json.dumps({"spec": {"arguments": changed}}), check=False)  # fmt: skip
    assert result.returncode != 0 and "arguments is immutable" in result.stderr, result.stderr
    # x-single-active-consumer is declared (a stream's rule asks has() of it) as RabbitMQ
    # takes it, a boolean: the integer 1 is refused at admission, as RabbitMQ refuses it.
    status, reply = _create(plane, ns, "Queue", {**REF, "arguments": {
        "x-single-active-consumer": 1}}, "sac")  # fmt: skip
    assert status == 422 and "x-single-active-consumer" in reply["message"], reply
