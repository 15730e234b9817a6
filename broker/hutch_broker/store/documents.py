"""The definitions document in keyed form: what replaying the journal edits.

A definitions document (the ``GET /api/definitions`` shape, as in ``definitions.json``) holds
lists; a journal record puts or deletes one item of one list. Here each list becomes a dict from
the item's identity to the item, in list order, so a put replaces an item in place (or appends
a new one) and a delete removes it, and ``to_export`` gives the lists back. Replacing in place
and appending new keys is exactly how the broker's own dicts order things, so a replayed
document lists what an export would list.

Two deletions cascade, as they do in the model (``Broker.delete_vhost``, ``delete_user``):
a vhost takes every item that names it, a user takes its permissions and topic permissions.
"""

from __future__ import annotations

import json
from typing import Any

Item = dict[str, Any]
Key = tuple[str, ...]

# The fields that identify an item of each section; a binding is also told apart by its
# arguments (EX-5). Sections not listed (never journaled) are keyed by their whole item.
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "vhosts": ("name",),
    "users": ("name",),
    "permissions": ("vhost", "user"),
    "topic_permissions": ("vhost", "user", "exchange"),
    "policies": ("vhost", "name"),
    "parameters": ("vhost", "component", "name"),
    "global_parameters": ("name",),
    "queues": ("vhost", "name"),
    "exchanges": ("vhost", "name"),
    "bindings": ("vhost", "source", "destination_type", "destination", "routing_key"),
}


def item_key(section: str, item: Item) -> Key:
    """The item's identity within its section; KeyError when a key field is missing."""
    fields = KEY_FIELDS.get(section)
    if fields is None:
        return (_canonical(item),)
    key = tuple(str(item[field]) for field in fields)
    if section == "bindings":
        key += (_canonical(item.get("arguments") or {}),)
    return key


class KeyedDefinitions:
    """A definitions document whose items can be put and deleted by identity."""

    def __init__(self, document: dict[str, Any] | None = None) -> None:
        self.scalars: dict[str, Any] = {}  # rabbit_version and the like, kept as they are
        self.sections: dict[str, dict[Key, Item]] = {}
        self.reset(document or {})

    def reset(self, document: dict[str, Any]) -> None:
        self.scalars = {k: v for k, v in document.items() if not isinstance(v, list)}
        self.sections = {}
        for section, items in document.items():
            if isinstance(items, list):
                keyed = self.sections.setdefault(section, {})
                for item in items:
                    keyed[item_key(section, item)] = item

    def put(self, section: str, item: Item) -> None:
        self.sections.setdefault(section, {})[item_key(section, item)] = item

    def delete(self, section: str, item: Item) -> None:
        self.sections.get(section, {}).pop(item_key(section, item), None)
        if section == "vhosts":
            self._drop_where("vhost", item["name"])
        elif section == "users":
            self._drop_where("user", item["name"], sections=("permissions", "topic_permissions"))

    def to_export(self) -> dict[str, Any]:
        document: dict[str, Any] = dict(self.scalars)
        for section, keyed in self.sections.items():
            document[section] = list(keyed.values())
        return document

    def _drop_where(self, field: str, value: Any, sections: tuple[str, ...] | None = None) -> None:
        for section, keyed in self.sections.items():
            if sections is not None and section not in sections:
                continue
            doomed = [key for key, item in keyed.items() if field in item and item[field] == value]
            for key in doomed:
                del keyed[key]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
