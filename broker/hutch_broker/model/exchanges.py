"""Exchanges, bindings and per-type matching (EX-1, EX-4, EX-5).

Routing is the hot path of every publish, so each exchange type keeps the
index that makes its match cheap: a dict for direct, a list for fanout, a
word trie (``topics``, matched in bounded time) plus a bounded result cache
for topic, and a linear scan for headers (whose bindings are few in
practice).  An exchange returns the *bindings' destinations*; following
exchange-to-exchange bindings and alternate exchanges is the vhost's job
(``vhosts.VirtualHost.route``), because it needs the whole graph and a visited set.

Each type matches three ways (``budgets``): ``match`` runs to the end, ``match_within``
charges a meter and stops before overdrawing it, ``match_steps`` is resumable.  Only topic
and headers matching can grow with the bindings; direct and fanout return their index.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from hutch_broker.model import budgets, topics
from hutch_broker.protocol import errors

if TYPE_CHECKING:
    from hutch_broker.model.queues import Queue

Headers = dict[str, Any]
HeadersSource = Callable[[], Headers]

EXCHANGE_TYPES: Final = ("direct", "fanout", "topic", "headers")
X_MATCH_MODES: Final = ("all", "any", "all-with-x", "any-with-x")
_TOPIC_CACHE_LIMIT: Final = 4096


def canonical_arguments(arguments: dict[str, Any] | None) -> str:
    """A stable text form of a binding's arguments, part of its identity (EX-5)."""
    if not arguments:
        return ""
    return json.dumps(arguments, sort_keys=True, default=repr, separators=(",", ":"))


@dataclass(eq=False, slots=True)
class Binding:
    """One edge from an exchange to a queue or exchange."""

    source: Exchange
    destination: Queue | Exchange
    routing_key: str
    arguments: dict[str, Any]
    identity: tuple[str, str, str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.identity = binding_identity(self.destination, self.routing_key, self.arguments)

    @property
    def destination_type(self) -> str:
        return "exchange" if isinstance(self.destination, Exchange) else "queue"

    @property
    def durable(self) -> bool:
        return self.source.durable and self.destination.durable


def binding_identity(
    destination: Queue | Exchange, routing_key: str, arguments: dict[str, Any] | None
) -> tuple[str, str, str, str]:
    kind = "exchange" if isinstance(destination, Exchange) else "queue"
    return (kind, destination.name, routing_key, canonical_arguments(arguments))


class Exchange:
    """Common state of every exchange type; subclasses implement ``match``."""

    kind: str = ""

    def __init__(
        self,
        name: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
        vhost: str = "/",
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.bindings: dict[tuple[str, str, str, str], Binding] = {}
        # Bindings in which this exchange is the destination, so deleting it
        # can unlink them from their sources.
        self.incoming: dict[int, Binding] = {}
        self.policy_alternate_exchange: str | None = None
        self.policy_name: str | None = None  # the user policy that applies, for the API
        self.declared_by = ""  # the user who created it, for user_who_performed_action
        self.stats_publish_in = 0
        self.stats_publish_out = 0

    @property
    def alternate_exchange(self) -> str | None:
        """AE-1: the argument wins over the policy key."""
        value = self.arguments.get("alternate-exchange")
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, str):
            return value
        return self.policy_alternate_exchange

    def add_binding(self, binding: Binding) -> bool:
        """Add ``binding``; False when an identical one exists (rebinding is a no-op)."""
        if binding.identity in self.bindings:
            return False
        self.validate_binding(binding)
        self.bindings[binding.identity] = binding
        self._index_add(binding)
        return True

    def remove_binding(self, identity: tuple[str, str, str, str]) -> Binding | None:
        binding = self.bindings.pop(identity, None)
        if binding is not None:
            self._index_remove(binding)
        return binding

    def validate_binding(self, binding: Binding) -> None:
        """Refuse a binding this type cannot use (headers checks x-match)."""

    def match(self, routing_key: str, headers: HeadersSource) -> Sequence[Queue | Exchange]:
        raise NotImplementedError

    def match_within(
        self, routing_key: str, headers: HeadersSource, meter: budgets.Meter
    ) -> Sequence[Queue | Exchange]:
        """``match``, charging ``meter`` for the work that grows with the bindings."""
        return self.match(routing_key, headers)

    def match_steps(
        self, routing_key: str, headers: HeadersSource
    ) -> budgets.Steps[Sequence[Queue | Exchange]]:
        """``match`` as a resumable computation (``budgets.Steps``)."""
        yield 1
        return self.match(routing_key, headers)

    def _index_add(self, binding: Binding) -> None:
        raise NotImplementedError

    def _index_remove(self, binding: Binding) -> None:
        raise NotImplementedError


class DirectExchange(Exchange):
    kind = "direct"

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._by_key: dict[str, list[Queue | Exchange]] = {}

    def match(self, routing_key: str, headers: HeadersSource) -> Sequence[Queue | Exchange]:
        return self._by_key.get(routing_key, ())

    def match_within(
        self, routing_key: str, headers: HeadersSource, meter: budgets.Meter
    ) -> Sequence[Queue | Exchange]:
        return self._by_key.get(routing_key, ())

    def _index_add(self, binding: Binding) -> None:
        self._by_key.setdefault(binding.routing_key, []).append(binding.destination)

    def _index_remove(self, binding: Binding) -> None:
        targets = self._by_key[binding.routing_key]
        targets.remove(binding.destination)
        if not targets:
            del self._by_key[binding.routing_key]


class FanoutExchange(Exchange):
    kind = "fanout"

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._targets: list[Queue | Exchange] = []

    def match(self, routing_key: str, headers: HeadersSource) -> Sequence[Queue | Exchange]:
        return self._targets

    def match_within(
        self, routing_key: str, headers: HeadersSource, meter: budgets.Meter
    ) -> Sequence[Queue | Exchange]:
        return self._targets

    def _index_add(self, binding: Binding) -> None:
        self._targets.append(binding.destination)

    def _index_remove(self, binding: Binding) -> None:
        self._targets.remove(binding.destination)


class TopicExchange(Exchange):
    """`*` matches one word, `#` zero or more; results cached per routing key.

    The matching itself is ``topics.TopicTrie``: bounded by routing-key words
    times trie nodes, whatever ``#`` words the bindings hold, with its transitions
    memoised and its steps metered.  A resumable match that saw the bindings change
    under it is not cached.
    """

    kind = "topic"

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._trie: topics.TopicTrie[Queue | Exchange] = topics.TopicTrie()
        self._cache: dict[str, list[Queue | Exchange]] = {}

    def match(self, routing_key: str, headers: HeadersSource) -> Sequence[Queue | Exchange]:
        return self.match_within(routing_key, headers, budgets.unlimited())

    def match_within(
        self, routing_key: str, headers: HeadersSource, meter: budgets.Meter
    ) -> Sequence[Queue | Exchange]:
        cached = self._cache.get(routing_key)
        if cached is not None:
            return cached
        found = self._trie.match_within(routing_key, meter)
        self._remember(routing_key, found)
        return found

    def match_steps(
        self, routing_key: str, headers: HeadersSource
    ) -> budgets.Steps[Sequence[Queue | Exchange]]:
        cached = self._cache.get(routing_key)
        if cached is not None:
            yield 1
            return cached
        version = self._trie.version
        found = yield from self._trie.match_steps(routing_key)
        if self._trie.version == version:
            self._remember(routing_key, found)
        return found

    def _remember(self, routing_key: str, found: list[Queue | Exchange]) -> None:
        if len(self._cache) >= _TOPIC_CACHE_LIMIT:
            self._cache.clear()
        self._cache[routing_key] = found

    def _index_add(self, binding: Binding) -> None:
        self._trie.add(binding.routing_key, binding.destination)
        self._cache.clear()

    def _index_remove(self, binding: Binding) -> None:
        self._trie.remove(binding.routing_key, binding.destination)
        self._cache.clear()


class HeadersExchange(Exchange):
    kind = "headers"

    def validate_binding(self, binding: Binding) -> None:
        mode = binding.arguments.get("x-match", "all")
        if isinstance(mode, bytes):
            mode = mode.decode("utf-8", "replace")
        if mode not in X_MATCH_MODES:
            raise errors.precondition_failed(
                f'Invalid x-match field value <<"{mode}">>; expected all, any, '
                "all-with-x, or any-with-x"
            )

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._weight = 0  # steps of one full scan: a binding and each of its arguments

    def match(self, routing_key: str, headers: HeadersSource) -> Sequence[Queue | Exchange]:
        if not self.bindings:
            return ()
        message_headers = headers()
        return [
            binding.destination
            for binding in self.bindings.values()
            if headers_match(binding.arguments, message_headers)
        ]

    def match_within(
        self, routing_key: str, headers: HeadersSource, meter: budgets.Meter
    ) -> Sequence[Queue | Exchange]:
        meter.charge(self._weight)
        return self.match(routing_key, headers)

    def match_steps(
        self, routing_key: str, headers: HeadersSource
    ) -> budgets.Steps[Sequence[Queue | Exchange]]:
        """The scan, a ``CHUNK`` of steps at a time, over the bindings as they were when
        it started (a binding added meanwhile is not seen, as if it came later)."""
        found: list[Queue | Exchange] = []
        if not self.bindings:
            return found
        message_headers = headers()
        scanned = 0
        for binding in list(self.bindings.values()):
            if headers_match(binding.arguments, message_headers):
                found.append(binding.destination)
            scanned += 1 + len(binding.arguments)
            if scanned >= budgets.CHUNK:
                yield scanned
                scanned = 0
        yield scanned
        return found

    def _index_add(self, binding: Binding) -> None:
        """The binding dict itself is the index; only its scan cost is kept."""
        self._weight += 1 + len(binding.arguments)

    def _index_remove(self, binding: Binding) -> None:
        self._weight -= 1 + len(binding.arguments)


def _normalise(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float(value) if isinstance(value, float) else value
    return value


def headers_match(binding_args: dict[str, Any], message_headers: Headers) -> bool:
    """EX-4 headers matching: all/any, optional x- keys, void means present."""
    mode = str(_normalise(binding_args.get("x-match", "all")))
    with_x = mode.endswith("-with-x")
    wanted = [
        (key, value)
        for key, value in binding_args.items()
        if key != "x-match" and (with_x or not key.startswith("x-"))
    ]
    if not wanted:
        return str(mode).startswith("all")
    results = (_header_matches(key, value, message_headers) for key, value in wanted)
    return all(results) if mode.startswith("all") else any(results)


def _header_matches(key: str, expected: Any, message_headers: Headers) -> bool:
    if key not in message_headers:
        return False
    if expected is None:
        return True
    actual = message_headers[key]
    left, right = _normalise(expected), _normalise(actual)
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    return bool(left == right)


_TYPES: Final[dict[str, type[Exchange]]] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
}


def make_exchange(name: str, exchange_type: str, **kwargs: Any) -> Exchange:
    """Build an exchange of ``exchange_type``; unknown types are a 406 (EX-1)."""
    cls = _TYPES.get(exchange_type)
    if cls is None:
        raise errors.precondition_failed(f"unknown exchange type '{exchange_type}'")
    return cls(name, **kwargs)
