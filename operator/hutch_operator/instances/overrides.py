"""``override.statefulSet`` / ``override.service``: merge a user patch over a generated object.

Why pure and strict: an override is the escape hatch for what the spec does not model, so it must
merge predictably (maps recursively, ``null`` deletes, lists of named maps by ``name``, other
lists replace) and must not become a way around the restricted security posture.
"""

from __future__ import annotations

import copy
from typing import Any

from hutch_operator.core import errors

FORBIDDEN_KEYS = ("hostNetwork", "hostPID", "hostIPC", "hostPath", "privileged")


def merge(base: Any, patch: Any) -> Any:
    """``base`` with ``patch`` applied; neither argument is modified."""
    if isinstance(base, dict) and isinstance(patch, dict):
        result = copy.deepcopy(base)
        for key, value in patch.items():
            if value is None:
                result.pop(key, None)
            elif key in result:
                result[key] = merge(result[key], value)
            else:
                result[key] = copy.deepcopy(value)
        return result
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        merged = [copy.deepcopy(item) for item in base]
        positions = {item["name"]: index for index, item in enumerate(merged)}
        for item in patch:
            if item["name"] in positions:
                merged[positions[item["name"]]] = merge(merged[positions[item["name"]]], item)
            else:
                merged.append(copy.deepcopy(item))
        return merged
    return copy.deepcopy(patch)


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(item, dict) and "name" in item for item in items)


def check_forbidden(patch: Any, path: str = "") -> None:
    """Raises ``ForbiddenOverrideError`` for host access, privilege or running as root."""
    if isinstance(patch, dict):
        for key, value in patch.items():
            where = f"{path}.{key}" if path else key
            if key in FORBIDDEN_KEYS and value not in (None, False):
                raise ForbiddenOverrideError(f"override sets {where}, which is not allowed")
            if key == "runAsUser" and value == 0:
                raise ForbiddenOverrideError(f"override sets {where}: 0 (root), not allowed")
            check_forbidden(value, where)
    elif isinstance(patch, list):
        for index, item in enumerate(patch):
            check_forbidden(item, f"{path}[{index}]")


class ForbiddenOverrideError(errors.SpecError):
    reason = "ForbiddenOverride"
