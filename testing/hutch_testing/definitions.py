"""Definitions documents for the management API's import, spelled in one place.

Why: broker-level tests import thousands of queues, exchanges and bindings in one
``POST /api/definitions[/<vhost>]`` (the isolation of an import, the paging of 20,000 bindings),
and each built the same JSON by hand: every field RabbitMQ's export writes, durable, no
arguments. A test says only what differs (names, routing keys, a bad binding at the end); the
shape of an item is here, so a field the import comes to require changes one place. The same
documents serve a broker-wide import (``Broker.import_definitions``, ``POST /api/definitions``)
through ``in_vhost``, which says where each item lives.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Item = dict[str, Any]


def exchange(name: str, kind: str = "direct") -> Item:
    """A durable exchange, not auto-deleted, not internal."""
    return {"name": name, "type": kind, "durable": True, "auto_delete": False,
            "internal": False, "arguments": {}}  # fmt: skip


def queue(name: str) -> Item:
    """A durable classic queue without arguments."""
    return {"name": name, "durable": True, "auto_delete": False, "arguments": {}}


def binding(source: str, destination: str, routing_key: str) -> Item:
    """A binding of queue ``destination`` to exchange ``source``."""
    return {"source": source, "destination": destination, "destination_type": "queue",
            "routing_key": routing_key, "arguments": {}}  # fmt: skip


def document(
    exchanges: Iterable[str], queues: Iterable[str], bindings: Iterable[tuple[str, str, str]]
) -> dict[str, list[Item]]:
    """A vhost's document: exchanges and queues by name, bindings as (source, queue, key)."""
    return {
        "exchanges": [exchange(name) for name in exchanges],
        "queues": [queue(name) for name in queues],
        "bindings": [binding(*edge) for edge in bindings],
    }


def imported(
    queues: int, exchanges: int, bindings: int, *, bad_binding_at_the_end: bool = False
) -> dict[str, list[Item]]:
    """The import tests' document: queues ``imported-00000``…, exchanges ``x00``…, binding ``i``
    from exchange ``i % exchanges`` to queue ``i`` with key ``k<i>``; with
    ``bad_binding_at_the_end``, one more binding to a queue that is nowhere (a 400 after all the
    good items)."""
    edges = [
        (f"x{index % exchanges:02d}", f"imported-{index:05d}", f"k{index}")
        for index in range(bindings)
    ]
    if bad_binding_at_the_end:
        edges.append(("x00", "no-such-queue", ""))
    return document(
        exchanges=[f"x{index:02d}" for index in range(exchanges)],
        queues=[f"imported-{index:05d}" for index in range(queues)],
        bindings=edges,
    )


def in_vhost(vhost_document: dict[str, list[Item]], vhost: str) -> dict[str, list[Item]]:
    """A broker-wide document of ``vhost_document``'s items, each placed in ``vhost``, with the
    vhost itself (created by the import when it is missing, left as it is when it exists)."""
    placed: dict[str, list[Item]] = {"vhosts": [{"name": vhost}]}
    for kind, items in vhost_document.items():
        placed[kind] = [{"vhost": vhost, **item} for item in items]
    return placed
