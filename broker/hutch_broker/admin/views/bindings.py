"""``/api/bindings`` items and the ``properties_key`` that names one binding (API-10).

A binding has no name of its own, so RabbitMQ derives one from its routing
key and arguments for use in URLs.  Hutch's key
(docs/contracts/broker.md#properties-key): ``~`` for an empty key
without arguments, the percent-encoded key when there are no arguments, and
``key~hash`` otherwise, the hash being 6 characters of base64url(SHA-256) of
the canonical JSON of the arguments.  Clients treat it as opaque, so it only
has to be stable and to tell bindings apart.

Every queue is also bound to the default exchange under its own name
(EX-2); those implicit bindings are listed with ``"source": ""`` first.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from hutch_broker.admin.views import formatting
from hutch_broker.model.exchanges import Binding, Exchange
from hutch_broker.model.queues import Queue
from hutch_broker.model.vhosts import VirtualHost

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


def arguments_hash(arguments: dict[str, Any]) -> str:
    canonical = json.dumps(
        formatting.jsonable(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    digest = hashlib.sha256(canonical.encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")[:6]


def quote_key(routing_key: str) -> str:
    """Percent-encode all but ``A-Za-z0-9-_.``; unlike ``urllib.parse.quote``, ``~`` too."""
    return "".join(
        chr(byte) if byte in _UNRESERVED else f"%{byte:02X}" for byte in routing_key.encode()
    )


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    if not arguments:
        return quote_key(routing_key) if routing_key else "~"
    return f"{quote_key(routing_key)}~{arguments_hash(arguments)}"


def key_matches(given: str, key: str) -> bool:
    """A URL may carry the key percent-decoded once more than we sent it (``*`` for ``%2A``)."""
    return given in (key, urllib.parse.unquote(key))


def _item(
    source: str,
    vhost: str,
    destination: str,
    destination_type: str,
    routing_key: str,
    arguments: dict[str, Any],
) -> dict[str, Any]:
    return {
        "source": source,
        "vhost": vhost,
        "destination": destination,
        "destination_type": destination_type,
        "routing_key": routing_key,
        "arguments": formatting.jsonable(arguments),
        "properties_key": properties_key(routing_key, arguments),
    }


def binding_item(binding: Binding, vhost: str) -> dict[str, Any]:
    return _item(
        binding.source.name,
        vhost,
        binding.destination.name,
        binding.destination_type,
        binding.routing_key,
        binding.arguments,
    )


def default_binding_item(queue: Queue, vhost: str) -> dict[str, Any]:
    return _item("", vhost, queue.name, "queue", queue.name, {})


def vhost_bindings(vhost: VirtualHost) -> list[dict[str, Any]]:
    """All bindings of a vhost: the implicit default-exchange ones, then the rest by source."""
    implicit = [
        default_binding_item(queue, vhost.name) for queue in _visible(vhost.queues.values())
    ]
    explicit = [binding_item(binding, vhost.name) for binding in vhost.bindings()]
    implicit.sort(key=lambda item: item["destination"])
    explicit.sort(key=explicit_order)
    return implicit + explicit


def explicit_order(item: dict[str, Any]) -> tuple[str, str, str]:
    return (item["source"], item["destination"], item["routing_key"])


# ``/api/bindings`` as model objects: a ``Queue`` stands for its implicit default-exchange
# binding, a ``Binding`` for itself. The item keys that can be read without rendering
# (``paced.Fields``); a binding item has no ``name``.
def edge_item(edge: Queue | Binding) -> dict[str, Any]:
    if isinstance(edge, Queue):
        return default_binding_item(edge, edge.vhost)
    return binding_item(edge, edge.source.vhost)


def implicit_edge_order(queue: Queue) -> str:
    """``vhost_bindings``' order of implicit bindings, read from the queue."""
    return queue.name


def explicit_edge_order(binding: Binding) -> tuple[str, str, str]:
    """``explicit_order``, read from the binding instead of its item."""
    return (binding.source.name, binding.destination.name, binding.routing_key)


def _edge_source(edge: Queue | Binding) -> str:
    return "" if isinstance(edge, Queue) else edge.source.name


def _edge_vhost(edge: Queue | Binding) -> str:
    return edge.vhost if isinstance(edge, Queue) else edge.source.vhost


def _edge_destination_type(edge: Queue | Binding) -> str:
    return "queue" if isinstance(edge, Queue) else edge.destination_type


def _edge_routing_key(edge: Queue | Binding) -> str:
    return edge.name if isinstance(edge, Queue) else edge.routing_key


def _edge_destination(edge: Queue | Binding) -> str:
    return edge.name if isinstance(edge, Queue) else edge.destination.name


EDGE_FIELDS: Final[Mapping[str, Callable[[Queue | Binding], Any]]] = {
    "source": _edge_source,
    "vhost": _edge_vhost,
    "destination": _edge_destination,
    "destination_type": _edge_destination_type,
    "routing_key": _edge_routing_key,
    "name": lambda edge: None,
}


def _visible(queues: Iterable[Queue]) -> Iterator[Queue]:
    return (queue for queue in queues if not queue.deleted)


def queue_bindings(queue: Queue, vhost: str) -> list[dict[str, Any]]:
    """``/api/queues/{vh}/{q}/bindings``: the default binding, then the explicit ones."""
    explicit = [binding_item(binding, vhost) for binding in queue.incoming.values()]
    explicit.sort(key=lambda item: (item["source"], item["routing_key"]))
    return [default_binding_item(queue, vhost), *explicit]


def exchange_bindings(exchange: Exchange, vhost: str, *, as_source: bool) -> list[dict[str, Any]]:
    """``…/bindings/source`` or ``…/bindings/destination`` of an exchange."""
    edges = exchange.bindings.values() if as_source else exchange.incoming.values()
    items = [binding_item(binding, vhost) for binding in edges]
    items.sort(key=lambda item: (item["source"], item["destination"], item["routing_key"]))
    return items


def between(source: Exchange, destination: Queue | Exchange) -> list[Binding]:
    """The bindings from ``source`` to ``destination``, in a stable order."""
    found = [binding for binding in source.bindings.values() if binding.destination is destination]
    found.sort(key=lambda binding: (binding.routing_key, binding.identity[3]))
    return found


def find(bindings: Iterable[Binding], given_key: str) -> Binding | None:
    for binding in bindings:
        if key_matches(given_key, properties_key(binding.routing_key, binding.arguments)):
            return binding
    return None
