"""Topic-exchange binding keys as a word trie, matched in bounded steps (EX-4).

Why this module exists: a depth-first walk that lets each ``#`` try every
possible number of words costs on the order of C(words + hashes, hashes), so one
binding such as ``#.#.#.#.#.#.x`` and a 45-word routing key froze the whole
broker for seconds.  Here the trie is walked as an NFA with a *set* of active
nodes, one routing-key word at a time: a node reached through a ``#`` edge stays
active (its ``#`` swallows the word), and every active node lets the walk fall
through its ``#`` child without consuming anything.  A node is active at most
once per word, so a match costs O(words x trie nodes) whatever the bindings.

That is still a million steps for 6,561 bindings over ``{a,*,#}`` and a 127-word
key, so two more things bound it:

- **Memoised transitions (a lazy DFA).**  Each set of active nodes met so far is a
  state; the set reached from it by a word is computed once and kept, keyed by the
  word, where every word that appears in no binding key shares one class.  A repeated
  key, or one that differs only in words no binding names (ids, timestamps), then costs
  one or two dict lookups per word.  Only sets of at most ``MEMO_NODES`` nodes are kept:
  the common case; the huge sets of adversarial bindings are walked, metered, each time.
  The automaton is dropped on every bind or unbind
  and cleared when it holds more node references than twice the trie's nodes (plus
  1,024), so its memory, and the work of a full garbage collection over it, stays
  proportional to the bindings.
- **Step budgets.**  ``match_within`` charges a ``budgets.Meter`` for every node it
  examines and stops (``OverBudgetError``) before overdrawing it; ``match_steps`` is
  the same walk as a generator that yields every ``budgets.CHUNK`` steps, so a caller
  can spread one expensive match over many event-loop turns (``dispatch.turns``).

Semantics (RabbitMQ's): keys split on ``.``, empty words are words, ``*`` is
exactly one word, ``#`` zero or more.  The empty key is zero words, as in RabbitMQ
(checked against 3.10.8): ``#`` and ``""`` match it, ``*`` does not.
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar

from hutch_broker.model import budgets

T = TypeVar("T")

STAR = "*"
HASH = "#"
# The class of every word that no binding key names: "." can never be a word of a key.
OTHER: Final = "."
MAX_STATES: Final = 4096  # automaton states kept per exchange before it is cleared
# Larger node sets are walked but not memoised: interning one (a frozenset, its hash, an
# equality check) costs as much as the step it would save, unmetered, and only adversarial
# binding sets produce them (the 6,561-binding case keeps thousands of nodes active).
MEMO_NODES: Final = 256
CHUNK: Final = budgets.CHUNK


class TrieNode(Generic[T]):
    """One binding-key word position; ``targets`` are the bindings ending here."""

    __slots__ = ("children", "hash_child", "swallows", "targets")

    def __init__(self, *, swallows: bool = False) -> None:
        self.children: dict[str, TrieNode[T]] = {}
        self.hash_child: TrieNode[T] | None = None  # children["#"], looked up on every step
        self.swallows = swallows  # reached through a '#': stays active on any word
        self.targets: list[T] = []


class State(Generic[T]):
    """A set of active trie nodes (closed under ``#`` edges) and its known successors."""

    __slots__ = ("following", "memoised", "nodes", "targets")

    def __init__(self, nodes: list[TrieNode[T]], *, memoised: bool = True) -> None:
        self.nodes = nodes
        self.memoised = memoised  # interned: its transitions and targets are kept
        self.following: dict[str, State[T]] = {}  # word (or OTHER) -> next state
        self.targets: list[T] | None = None  # computed the first time a key ends here


class Automaton(Generic[T]):
    """The states met so far for one version of the trie, interned by their node set."""

    __slots__ = ("limit", "size", "start", "states")

    def __init__(self, start_nodes: list[TrieNode[T]], limit: int) -> None:
        self.limit = limit  # node references (plus transitions) kept before clearing
        self.start: State[T] = State(start_nodes)
        self.states: dict[frozenset[TrieNode[T]], State[T]] = {}
        self.size = 0
        self._clear()

    def intern(self, nodes: list[TrieNode[T]]) -> State[T]:
        if len(nodes) > MEMO_NODES:
            return State(nodes, memoised=False)
        key = frozenset(nodes)
        state = self.states.get(key)
        if state is None:
            if len(self.states) >= MAX_STATES or self.size + len(nodes) > self.limit:
                self._clear()
                state = self.states.get(key)
            if state is None:
                state = self.states[key] = State(nodes)
                self.size += len(nodes)
        return state

    def discard(self) -> None:
        """Unlink every state, so dropping them is reference counting's work, not a cycle
        collection's (states point at each other, and at themselves)."""
        for state in self.states.values():
            state.following = {}

    def _clear(self) -> None:
        """Forget every state.  Walks in progress keep the state they stand on and go on
        from there; new walks start from a fresh start state."""
        self.discard()
        start = self.start = State(self.start.nodes)
        self.states = {frozenset(start.nodes): start}
        self.size = len(start.nodes)

    def link(self, state: State[T], word: str, nodes: list[TrieNode[T]]) -> State[T]:
        following = self.intern(nodes)
        if state.memoised and following.memoised:
            state.following[word] = following
            self.size += 1
        return following


class TopicTrie(Generic[T]):
    """Binding keys of one topic exchange, with ``add``, ``remove`` and the matchers."""

    def __init__(self) -> None:
        self.root: TrieNode[T] = TrieNode()
        self.version = 0  # bumped by every add and remove
        self._node_count = 1
        self._vocabulary: dict[str, int] = {}  # literal edge word -> edges with it
        self._automaton: Automaton[T] | None = None

    def add(self, binding_key: str, target: T) -> None:
        node = self.root
        for word in _words(binding_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = TrieNode(swallows=word == HASH)
                self._node_count += 1
                if word == HASH:
                    node.hash_child = child
                elif word != STAR:
                    self._vocabulary[word] = self._vocabulary.get(word, 0) + 1
            node = child
        node.targets.append(target)
        self._changed()

    def remove(self, binding_key: str, target: T) -> None:
        """Remove one ``target`` under ``binding_key`` and prune nodes left empty."""
        words = _words(binding_key)
        path = [self.root]
        for word in words:
            path.append(path[-1].children[word])
        path[-1].targets.remove(target)
        self._changed()
        for depth in range(len(words), 0, -1):
            node = path[depth]
            if node.targets or node.children:
                break
            parent, word = path[depth - 1], words[depth - 1]
            del parent.children[word]
            self._node_count -= 1
            if word == HASH:
                parent.hash_child = None
            elif word != STAR:
                self._forget_word(word)

    def match(self, routing_key: str) -> list[T]:
        """Targets of every binding key matching ``routing_key``, each once, in trie order."""
        return self.match_within(routing_key, budgets.unlimited())

    def match_within(self, routing_key: str, meter: budgets.Meter) -> list[T]:
        """``match``, charging ``meter`` for each node examined (``OverBudgetError`` before
        overdrawing it).  Known transitions cost nothing: a few dict lookups per word."""
        automaton = self._automaton or self._new_automaton()
        vocabulary = self._vocabulary
        state = automaton.start
        for word in _words(routing_key):
            label = word if word in vocabulary else OTHER
            known = state.following.get(label)
            if known is None:
                meter.charge(len(state.nodes))
                reached = _step(state.nodes, label)
                meter.charge(len(reached))
                known = automaton.link(state, label, _closure(reached, meter))
            state = known
            if not state.nodes:
                return []
        targets = state.targets
        if targets is None:
            meter.charge(len(state.nodes))
            targets = _targets(state.nodes)
            if state.memoised:
                state.targets = targets
        return targets

    def match_steps(self, routing_key: str) -> budgets.Steps[list[T]]:
        """``match`` as a generator yielding the steps done, at most ``CHUNK`` at a time."""
        automaton = self._automaton or self._new_automaton()
        vocabulary = self._vocabulary
        state = automaton.start
        walked = 0
        for word in _words(routing_key):
            label = word if word in vocabulary else OTHER
            known = state.following.get(label)
            if known is None:
                reached = yield from _step_steps(state.nodes, label)
                closed = yield from _closure_steps(reached)
                known = automaton.link(state, label, closed)
            state = known
            walked += 1
            if walked >= CHUNK:
                yield walked
                walked = 0
            if not state.nodes:
                return []
        targets = state.targets
        if targets is None:
            targets = yield from _targets_steps(state.nodes)
            if state.memoised:
                state.targets = targets
        return targets

    def _new_automaton(self) -> Automaton[T]:
        start = _closure([self.root], budgets.unlimited())  # one chain of '#': the key depth
        automaton = self._automaton = Automaton(start, limit=1024 + 2 * self._node_count)
        return automaton

    def _changed(self) -> None:
        self.version += 1
        if self._automaton is not None:
            self._automaton.discard()
            self._automaton = None

    def _forget_word(self, word: str) -> None:
        left = self._vocabulary[word] - 1
        if left:
            self._vocabulary[word] = left
        else:
            del self._vocabulary[word]


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


def _step_steps(active: list[TrieNode[T]], word: str) -> budgets.Steps[list[TrieNode[T]]]:
    """``_step`` a ``CHUNK`` of nodes at a time: the same nodes in the same order."""
    reached: dict[TrieNode[T], None] = {}
    for start in range(0, len(active), CHUNK):
        part = active[start : start + CHUNK]
        for node in _step(part, word):
            reached[node] = None
        yield len(part)
    return list(reached)


def _closure(nodes: list[TrieNode[T]], meter: budgets.Meter) -> list[TrieNode[T]]:
    """Add every node reachable through ``#`` edges matching zero words."""
    for node in nodes:
        if node.hash_child is not None:
            break
    else:
        return nodes
    seen = set(nodes)
    closed = list(nodes)
    room = meter.left + len(nodes)
    for node in closed:  # grows while iterating: a chain '#.#.#' is followed to its end
        child = node.hash_child
        if child is not None and child not in seen:
            seen.add(child)
            closed.append(child)
            if len(closed) > room:
                raise budgets.OverBudgetError
    meter.left -= len(closed) - len(nodes)
    return closed


def _closure_steps(nodes: list[TrieNode[T]]) -> budgets.Steps[list[TrieNode[T]]]:
    """``_closure`` yielding every ``CHUNK`` nodes examined: the same nodes, same order."""
    seen = set(nodes)
    closed = list(nodes)
    examined = 0
    for node in closed:
        child = node.hash_child
        if child is not None and child not in seen:
            seen.add(child)
            closed.append(child)
        examined += 1
        if examined >= CHUNK:
            yield examined
            examined = 0
    yield examined
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


def _targets_steps(nodes: list[TrieNode[T]]) -> budgets.Steps[list[T]]:
    """``_targets`` yielding every ``CHUNK`` nodes or targets examined."""
    found: list[T] = []
    seen: set[int] = set()
    examined = 0
    for node in nodes:
        examined += 1 + len(node.targets)
        for target in node.targets:
            if id(target) not in seen:
                seen.add(id(target))
                found.append(target)
        if examined >= CHUNK:
            yield examined
            examined = 0
    yield examined
    return found
