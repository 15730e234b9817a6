"""Which queues a message published to an exchange reaches (EX-4, EX-5, AE-2).

Pure functions over a vhost's exchange graph: they read exchanges, bindings and queues and
change nothing, so the rules (each exchange visited once, every routing key matched together,
the alternate exchange only when nothing matched, each queue once) can be read and tested
apart from the vhost that edits the graph. Publishing (``publishes``) and dead-lettering
(``deadletter.republish``) route through here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from hutch_broker.model.exchanges import Exchange
from hutch_broker.model.messages import Message
from hutch_broker.model.queues import Queue


class Graph(Protocol):
    """What routing reads of a vhost (a ``VirtualHost``)."""

    @property
    def exchanges(self) -> Mapping[str, Exchange]: ...

    @property
    def queues(self) -> Mapping[str, Queue]: ...

    @property
    def default_exchange(self) -> Exchange: ...


def route(
    graph: Graph, exchange: Exchange, routing_keys: Iterable[str], message: Message
) -> list[Queue]:
    """Every queue the message reaches, once each (EX-4, EX-5, AE-2).

    Each exchange is visited once and matches all the routing keys (the key plus CC/BCC)
    together, as RabbitMQ routes a delivery; only when none of them matched does its
    alternate exchange get the message.
    """
    if exchange is graph.default_exchange:
        return route_default(graph.queues, routing_keys)
    keys = routing_keys if isinstance(routing_keys, list) else list(routing_keys)
    found: list[Queue] = []
    seen: set[int] = set()
    visited = {id(exchange)}
    frontier = [exchange]
    while frontier:
        current = frontier.pop()
        matched = False
        for routing_key in keys:
            for destination in current.match(routing_key, message.headers):
                matched = True
                if isinstance(destination, Exchange):
                    if id(destination) not in visited:
                        visited.add(id(destination))
                        frontier.append(destination)
                elif id(destination) not in seen:
                    seen.add(id(destination))
                    found.append(destination)
        if not matched:
            alternate = alternate_of(graph.exchanges, current, visited)
            if alternate is not None:
                visited.add(id(alternate))
                frontier.append(alternate)
    return found


def route_default(queues: Mapping[str, Queue], routing_keys: Iterable[str]) -> list[Queue]:
    """The default exchange: the queue named by each routing key, if it exists."""
    found: list[Queue] = []
    for routing_key in routing_keys:
        queue = queues.get(routing_key)
        if queue is not None and queue not in found:
            found.append(queue)
    return found


def alternate_of(
    exchanges: Mapping[str, Exchange], exchange: Exchange, visited: set[int]
) -> Exchange | None:
    """The exchange's alternate exchange, unless it is missing or already visited (AE-2)."""
    name = exchange.alternate_exchange
    if name is None:
        return None
    alternate = exchanges.get(name)
    if alternate is None or id(alternate) in visited:
        return None
    return alternate
