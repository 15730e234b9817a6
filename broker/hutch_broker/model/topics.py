"""Topic-exchange binding keys as a word trie, matched in bounded time (EX-4).

Why this module exists: a depth-first walk that lets each ``#`` try every
possible number of words costs on the order of C(words + hashes, hashes), so one
binding such as ``#.#.#.#.#.#.x`` and a 45-word routing key froze the whole
broker for seconds.  Here the trie is walked as an NFA with a *set* of active
nodes, one routing-key word at a time: a node reached through a ``#`` edge stays
active (its ``#`` swallows the word), and every active node lets the walk fall
through its ``#`` child without consuming anything.  A node is active at most
once per word, so a match costs O(words x trie nodes) whatever the bindings.

Semantics (RabbitMQ's): keys split on ``.``, empty words are words, ``*`` is
exactly one word, ``#`` zero or more.  The empty key is zero words, as in RabbitMQ
(checked against 3.10.8): ``#`` and ``""`` match it, ``*`` does not.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")

STAR = "*"
HASH = "#"


class TrieNode(Generic[T]):
    """One binding-key word position; ``targets`` are the bindings ending here."""

    __slots__ = ("children", "hash_child", "swallows", "targets")

    def __init__(self, *, swallows: bool = False) -> None:
        self.children: dict[str, TrieNode[T]] = {}
        self.hash_child: TrieNode[T] | None = None  # children["#"], looked up on every step
        self.swallows = swallows  # reached through a '#': stays active on any word
        self.targets: list[T] = []


class TopicTrie(Generic[T]):
    """Binding keys of one topic exchange, with ``add``, ``remove`` and ``match``."""

    def __init__(self) -> None:
        self.root: TrieNode[T] = TrieNode()

    def add(self, binding_key: str, target: T) -> None:
        node = self.root
        for word in _words(binding_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = TrieNode(swallows=word == HASH)
                if word == HASH:
                    node.hash_child = child
            node = child
        node.targets.append(target)

    def remove(self, binding_key: str, target: T) -> None:
        """Remove one ``target`` under ``binding_key`` and prune nodes left empty."""
        words = _words(binding_key)
        path = [self.root]
        for word in words:
            path.append(path[-1].children[word])
        path[-1].targets.remove(target)
        for depth in range(len(words), 0, -1):
            node = path[depth]
            if node.targets or node.children:
                break
            parent, word = path[depth - 1], words[depth - 1]
            del parent.children[word]
            if word == HASH:
                parent.hash_child = None

    def match(self, routing_key: str) -> list[T]:
        """Targets of every binding key matching ``routing_key``, each once, in trie order."""
        active = _closure([self.root])
        for word in _words(routing_key):
            active = _closure(_step(active, word))
            if not active:
                return []
        return _targets(active)


def _words(key: str) -> list[str]:
    """A key's words: ``""`` is none (RabbitMQ's ``split_topic_key``), ``"a."`` is two."""
    return key.split(".") if key else []


def _step(active: list[TrieNode[T]], word: str) -> list[TrieNode[T]]:
    """The nodes reachable from ``active`` by consuming ``word`` (not yet closed)."""
    if len(active) == 1 and not active[0].swallows:  # the common case: one plain node
        children = active[0].children
        exact, star = children.get(word), children.get(STAR)
        if star is None:
            return [] if exact is None else [exact]
        return [star] if exact is None else [exact, star]
    reached: dict[TrieNode[T], None] = {}
    for node in active:
        if node.swallows:
            reached[node] = None
        children = node.children
        exact = children.get(word)
        if exact is not None:
            reached[exact] = None
        star = children.get(STAR)
        if star is not None:
            reached[star] = None
    return list(reached)


def _closure(nodes: list[TrieNode[T]]) -> list[TrieNode[T]]:
    """Add every node reachable through ``#`` edges matching zero words."""
    for node in nodes:
        if node.hash_child is not None:
            break
    else:
        return nodes
    seen = set(nodes)
    closed = list(nodes)
    for node in closed:  # grows while iterating: a chain '#.#.#' is followed to its end
        child = node.hash_child
        if child is not None and child not in seen:
            seen.add(child)
            closed.append(child)
    return closed


def _targets(nodes: list[TrieNode[T]]) -> list[T]:
    """Every node's targets, each target once (two keys may bind the same queue)."""
    if len(nodes) == 1 and len(nodes[0].targets) < 2:
        return list(nodes[0].targets)
    found: list[T] = []
    seen: set[int] = set()
    for node in nodes:
        for target in node.targets:
            if id(target) not in seen:
                seen.add(id(target))
                found.append(target)
    return found
