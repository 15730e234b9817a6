"""The committed CRDs are the generated ones, structurally sound, and the examples fit them.

CEL behaviour (422 on update, refused objects with readable messages) is exercised against a
real kube-apiserver in test_crd_validation.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hutch_operator import crdgen
from hutch_operator.models import kinds

REPO = Path(__file__).resolve().parents[2]
COPIES = (REPO / "crds", REPO / "charts" / "hutch-operator" / "crds")

#: kind → spec fields that must carry an immutability rule (docs/contracts/operator.md#immutability).
IMMUTABLE = {
    "Queue": ["vhost", "type", "durable", "autoDelete", "arguments", "singleActiveConsumer",
              "stream", "brokerRef", "connectionSecret", "name"],
    "Exchange": ["vhost", "type", "durable", "autoDelete", "internal", "arguments", "brokerRef",
                 "connectionSecret", "name"],
    "Binding": ["vhost", "source", "destination", "destinationType", "routingKey", "arguments",
                "brokerRef", "connectionSecret"],
    "Policy": ["vhost", "brokerRef", "connectionSecret", "name"],
    "OperatorPolicy": ["vhost", "brokerRef", "connectionSecret", "name"],
    "Broker": [],
    "Vhost": ["brokerRef", "connectionSecret", "name", "defaultQueueType"],
    "User": ["brokerRef", "connectionSecret", "name"],
    "Permission": ["vhost", "user", "brokerRef", "connectionSecret"],
    "TopicPermission": ["vhost", "user", "exchange", "brokerRef", "connectionSecret"],
}  # fmt: skip


@pytest.mark.parametrize("directory", COPIES, ids=["crds", "chart"])
def test_committed_crds_are_generated(directory: Path) -> None:
    generated = crdgen.documents()
    committed = {path.name: path.read_text() for path in directory.glob("*.yaml")}
    assert committed == generated, (
        "run: python -m hutch_operator.crdgen --out crds --chart charts/hutch-operator/crds"
    )


def _schema(kind: kinds.Kind) -> dict[str, Any]:
    crd = crdgen.crd(kind)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.kind)
def test_structural(kind: kinds.Kind) -> None:
    text = json.dumps(_schema(kind))
    assert "$ref" not in text and '"anyOf"' not in text and '"title"' not in text
    assert '"const"' not in text and '"null"' not in text

    def visit(node: Any, path: str) -> None:
        if isinstance(node, dict):
            typed = (
                "type" in node
                or node.get("x-kubernetes-int-or-string")
                or node.get("x-kubernetes-preserve-unknown-fields")
            )
            if "properties" in node or "items" in node:
                assert typed, path
            for key, value in node.get("properties", {}).items():
                assert (
                    "type" in value
                    or value.get("x-kubernetes-int-or-string")
                    or value.get("x-kubernetes-preserve-unknown-fields")
                ), f"{path}.{key}"
                visit(value, f"{path}.{key}")
            for key in ("items", "additionalProperties"):
                if isinstance(node.get(key), dict):
                    visit(node[key], f"{path}[{key}]")

    visit(_schema(kind), kind.kind)


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.kind)
def test_immutable_fields_have_rules(kind: kinds.Kind) -> None:
    spec = _schema(kind)["properties"]["spec"]
    spec_rules = " ".join(r["rule"] for r in spec.get("x-kubernetes-validations", []))
    for field in IMMUTABLE[kind.kind]:
        field_rules = [
            r["rule"] for r in spec["properties"][field].get("x-kubernetes-validations", [])
        ]
        assert "self == oldSelf" in field_rules or f"has(oldSelf.{field})" in spec_rules, field


def test_printer_columns_and_names() -> None:
    queue = crdgen.crd(kinds.QUEUE)["spec"]
    assert queue["names"]["shortNames"] == ["hq"] and queue["names"]["categories"] == ["hutch"]
    columns = [c["name"] for c in queue["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Ready", "Messages", "Consumers", "Policy", "Vhost", "Type",
                       "First Offset", "Last Offset", "Age"]  # fmt: skip
    assert queue["versions"][0]["subresources"] == {"status": {}}


def _examples() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d["apiVersion"].startswith("hutch.dev/")]


@pytest.mark.parametrize(
    "example", _examples(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_examples_validate(example: dict[str, Any]) -> None:
    kind = kinds.BY_KIND[example["kind"]]
    jsonschema.Draft4Validator(_schema(kind)).validate(example)  # OpenAPI 3.0 is draft-4-like
    kind.spec.model_validate(example["spec"])
