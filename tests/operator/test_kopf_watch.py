"""Objects come off Kopf's list and watch streams without ``metadata.managedFields``.

Kopf keeps each object's body while its worker waits at the start-up gate or lags behind the
watch; the apiserver's field-manager bookkeeping in those bodies was a large share of the
operator's RSS at 10,000 Queues and is read by nobody. Driven through Kopf's real
``infinite_watch`` (its list, then its watch), with the two API calls scripted.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from hutch_operator.core import kopfpatches
from kopf._cogs.clients import watching
from kopf._cogs.structs import references

MANAGED = [
    {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
     "fieldsV1": {"f:spec": {"f:brokerRef": {".": {}, "f:name": {}}}}},
    {"manager": "kopf", "operation": "Update", "subresource": "status", "fieldsType": "FieldsV1",
     "fieldsV1": {"f:status": {"f:conditions": {}, "f:declared": {}}}},
]  # fmt: skip


def queue(name: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "hutch.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}",
                     "resourceVersion": version, "managedFields": copy.deepcopy(MANAGED)},
        "spec": {"brokerRef": {"name": "hutch"}},
    }  # fmt: skip


async def stream(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    async def fetch_objs(**_: Any) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        yield [queue("listed", "5")], "5"

    watches = [
        [{"type": "ADDED", "object": queue("added", "6")},
         {"type": "MODIFIED", "object": queue("added", "7")}],
        [{"type": "ERROR", "object": {"code": 410}}],  # ends the stream: Kopf re-lists
    ]  # fmt: skip

    async def watch_objs(**_: Any) -> AsyncIterator[dict[str, Any]]:
        for event in watches.pop(0):
            yield event

    monkeypatch.setattr(watching.fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0
    resource = references.Resource("hutch.dev", "v1alpha1", "queues", namespaced=True)
    return [
        event
        async for event in watching.infinite_watch(
            settings=settings, resource=resource, namespace=None, _iterations=1
        )
    ]


async def test_listed_and_watched_objects_carry_no_managed_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert kopfpatches.apply()
    events = [event for event in await stream(monkeypatch) if isinstance(event, dict)]
    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        (None, "5"), ("ADDED", "6"), ("MODIFIED", "7")
    ]  # fmt: skip
    for event in events:
        metadata = event["object"]["metadata"]
        assert "managedFields" not in metadata
        assert metadata["uid"] and metadata["name"]  # everything else is kept
        assert event["object"]["spec"] == {"brokerRef": {"name": "hutch"}}


def test_strip_leaves_bookmarks_and_bodies_without_metadata_alone() -> None:
    assert kopfpatches.strip(watching.Bookmark.LISTED) is watching.Bookmark.LISTED
    assert kopfpatches.strip({"type": "BOOKMARK", "object": {"kind": "Queue"}}) == {
        "type": "BOOKMARK", "object": {"kind": "Queue"}
    }  # fmt: skip
