"""metav1.Condition upserts that keep ``lastTransitionTime`` unless the status flips.

Why: rewriting the timestamp on every reconcile (MTO #250) turns each reconcile into a status
write and each status write into a watch event for every client: a storm at scale. Together
with ``status_patch`` (only what changed) a steady object costs no Kubernetes writes at all.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

Condition = dict[str, Any]

# ``kubectl hutch pause-reconciliation``: an object carrying this annotation ("true") is left
# alone by every reconcile path (declare, sweep, wake-ups; a Broker's children), and says so in
# the ``ReconciliationPaused`` condition; removing it resumes at once (an update event).
PAUSE_ANNOTATION = "hutch.dev/pause-reconciliation"
PAUSED = "ReconciliationPaused"
PAUSED_MESSAGE = (
    f"the {PAUSE_ANNOTATION} annotation is set: the operator leaves this object alone; "
    "remove it (kubectl hutch resume-reconciliation) to resume"
)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for condition in conditions or ():
        if condition.get("type") == type_:
            return condition
    return None


def is_true(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> bool:
    condition = find(conditions, type_)
    return condition is not None and condition.get("status") == "True"


def is_paused(metadata: Mapping[str, Any]) -> bool:
    annotations = metadata.get("annotations") or {}
    return str(annotations.get(PAUSE_ANNOTATION, "")).lower() == "true"


def pause_update(
    current: Sequence[Mapping[str, Any]] | None, paused: bool, generation: int | None
) -> list[Condition] | None:
    """The conditions with ``ReconciliationPaused`` True while paused, False once resumed
    (an object never paused gets no such condition); None when nothing changes."""
    before = find(current, PAUSED)
    if before is None and not paused:
        return None
    if before is not None and before.get("status") == ("True" if paused else "False"):
        return None
    reason, message = ("PausedByAnnotation", PAUSED_MESSAGE) if paused else ("Resumed", "")
    return upsert(current, type_=PAUSED, status=paused, reason=reason, message=message,
                  generation=generation)  # fmt: skip


def upsert(
    conditions: Sequence[Mapping[str, Any]] | None,
    *,
    type_: str,
    status: bool,
    reason: str,
    message: str = "",
    generation: int | None = None,
    timestamp: str | None = None,
) -> list[Condition]:
    """A new list with condition ``type_`` set; order of other conditions is kept."""
    wanted = "True" if status else "False"
    result: list[Condition] = []
    replaced = False
    for condition in conditions or ():
        if condition.get("type") != type_:
            result.append(dict(condition))
            continue
        keep_time = condition.get("status") == wanted and condition.get("lastTransitionTime")
        result.append(
            _make(type_, wanted, reason, message, generation, keep_time or timestamp or now())
        )
        replaced = True
    if not replaced:
        result.append(_make(type_, wanted, reason, message, generation, timestamp or now()))
    return result


def _make(
    type_: str, status: str, reason: str, message: str, generation: int | None, when: str
) -> Condition:
    condition: Condition = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": when,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def status_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch turning ``current`` status into ``desired`` (top-level keys only).

    Keys mapped to None are removed; an empty result means no write is needed.
    """
    return {key: value for key, value in desired.items() if current.get(key) != value}
