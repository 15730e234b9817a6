"""Pydantic JSON Schema (2020-12) → a Kubernetes structural OpenAPI v3 schema.

Why a converter and not hand-written YAML: the models are the single source of truth. The
apiserver refuses ``$ref``, ``anyOf`` with ``null``, ``const``, ``title`` is noise, and
2020-12's numeric ``exclusiveMinimum`` is a boolean in OpenAPI 3.0; this module rewrites exactly
those, recursively, and nothing else.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_DROPPED_KEYS = frozenset({"title"})


def structural(model: type[BaseModel]) -> dict[str, Any]:
    """The structural schema of ``model`` (validation mode, camelCase aliases)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.pop("$defs", {})
    converted: dict[str, Any] = _convert(raw, definitions)
    return converted


def _convert(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_convert(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    node = _inline(_drop_null_branch(_inline(node, definitions)), definitions)
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key in {"properties", "patternProperties"}:
            result[key] = {name: _convert(sub, definitions) for name, sub in value.items()}
        elif key == "default" and value is None:
            continue
        else:
            result[key] = _convert(value, definitions)
    return _openapi_fixups(result)


def _inline(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """Replaces ``$ref`` by the referenced definition, keeping sibling keys (defaults, rules)."""
    if "$ref" not in node:
        return node
    name = node["$ref"].rsplit("/", 1)[-1]
    merged = dict(definitions[name])
    merged.update({k: v for k, v in node.items() if k != "$ref"})
    return merged


def _drop_null_branch(node: dict[str, Any]) -> dict[str, Any]:
    """``Optional[X]`` is ``anyOf: [X, {type: null}]``; a CRD says optional by not requiring."""
    branches = node.get("anyOf")
    if not isinstance(branches, list):
        return node
    kept = [b for b in branches if b != {"type": "null"}]
    if len(kept) != 1 or len(kept) == len(branches):
        return node
    merged = dict(kept[0])
    merged.update({k: v for k, v in node.items() if k != "anyOf"})
    return merged


def _openapi_fixups(node: dict[str, Any]) -> dict[str, Any]:
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(
        node["exclusiveMinimum"], bool
    ):
        node["minimum"] = node.pop("exclusiveMinimum")
        node["exclusiveMinimum"] = True
    if isinstance(node.get("exclusiveMaximum"), int | float) and not isinstance(
        node["exclusiveMaximum"], bool
    ):
        node["maximum"] = node.pop("exclusiveMaximum")
        node["exclusiveMaximum"] = True
    extra = node.get("additionalProperties")
    if extra is False:
        del node["additionalProperties"]
    elif extra is True or extra == {}:
        del node["additionalProperties"]
        node["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("x-kubernetes-int-or-string"):
        node.pop("type", None)
    if node.get("type") == "object" and node.get("properties") == {}:
        del node["properties"]
    return node
