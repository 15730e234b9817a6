"""Which queues a message published to an exchange reaches (EX-4, EX-5, AE-2).

Pure functions over a vhost's exchange graph: they read exchanges, bindings and queues and
change nothing, so the rules (each exchange visited once, every routing key matched together,
the alternate exchange only when nothing matched, each queue once) can be read and tested
apart from the vhost that edits the graph. Publishing (``publishes``) and dead-lettering
(``deadletter.republish``) route through here.

A route can grow with the graph (thousands of bindings, CC lists, exchange chains, fanouts
to thousands of queues), so it exists twice over the same rules (``budgets``): ``route``
charges a meter and stops with ``OverBudgetError`` before overdrawing it, and
``route_steps`` is the same walk as a resumable computation, which ``basic.publish`` runs a
slice per event-loop turn.  The tests hold the two to the same answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from hutch_broker.model import budgets
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

    @property
    def backlog(self) -> budgets.Backlog:
        """Where routing that does not fit in the loop turn waits (dead letters)."""


def route(
    graph: Graph,
    exchange: Exchange,
    routing_keys: Iterable[str],
    message: Message,
    meter: budgets.Meter | None = None,
) -> list[Queue]:
    """Every queue the message reaches, once each (EX-4, EX-5, AE-2).

    Each exchange is visited once and matches all the routing keys (the key plus CC/BCC)
    together, as RabbitMQ routes a delivery; only when none of them matched does its
    alternate exchange get the message.  With a ``meter``, each key tried on an exchange
    and each destination collected costs a step, and the exchanges charge their own
    matching; without one the route runs to the end (dead-lettering, HTTP, transactions).
    """
    if meter is None:
        meter = budgets.unlimited()
    keys = routing_keys if isinstance(routing_keys, list) else list(routing_keys)
    if exchange is graph.default_exchange:
        meter.charge(len(keys))
        return route_default(graph.queues, keys)
    found: list[Queue] = []
    seen: set[int] = set()
    visited = {id(exchange)}
    frontier = [exchange]
    while frontier:
        current = frontier.pop()
        matched = False
        for routing_key in keys:
            destinations = current.match_within(routing_key, message.headers, meter)
            left = meter.left - 1 - len(destinations)  # meter.charge, inlined: the hot path
            if left < 0:
                raise budgets.OverBudgetError
            meter.left = left
            for destination in destinations:
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


def route_steps(
    graph: Graph, exchange: Exchange, routing_keys: list[str], message: Message
) -> budgets.Steps[list[Queue]]:
    """``route`` as a resumable computation: the same rules, the same queues, in order.

    The graph may change between two slices (other connections run in between): an
    exchange deleted meanwhile still routes what it had, a queue deleted meanwhile is
    skipped by whoever enqueues (``queue.deleted``), as a publish racing a delete can go
    either way on RabbitMQ too.
    """
    if exchange is graph.default_exchange:
        yield len(routing_keys)
        return route_default(graph.queues, routing_keys)
    found: list[Queue] = []
    seen: set[int] = set()
    visited = {id(exchange)}
    frontier = [exchange]
    collected = 0
    while frontier:
        current = frontier.pop()
        matched = False
        for routing_key in routing_keys:
            destinations = yield from current.match_steps(routing_key, message.headers)
            collected += 1
            for destination in destinations:
                matched = True
                if isinstance(destination, Exchange):
                    if id(destination) not in visited:
                        visited.add(id(destination))
                        frontier.append(destination)
                elif id(destination) not in seen:
                    seen.add(id(destination))
                    found.append(destination)
                collected += 1
                if collected >= budgets.CHUNK:
                    yield collected
                    collected = 0
        if not matched:
            alternate = alternate_of(graph.exchanges, current, visited)
            if alternate is not None:
                visited.add(id(alternate))
                frontier.append(alternate)
    yield collected
    return found


def route_default(queues: Mapping[str, Queue], routing_keys: list[str]) -> list[Queue]:
    """The default exchange: the queue named by each routing key, if it exists."""
    if len(routing_keys) == 1:
        queue = queues.get(routing_keys[0])
        return [] if queue is None else [queue]
    found: list[Queue] = []
    seen: set[int] = set()
    for routing_key in routing_keys:
        queue = queues.get(routing_key)
        if queue is not None and id(queue) not in seen:  # linear in a long CC list too
            seen.add(id(queue))
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
