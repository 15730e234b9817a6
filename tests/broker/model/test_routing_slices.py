"""Routing in metered slices: bounded work per slice, the same queues as routing at once.

The case from the "Isolation and scale" issue: a topic exchange with the 6,561 bindings of
8 words over {a,*,#} and 127-word routing keys.  One publish walked about a million trie
nodes in one go (over a second in the broker, every connection of every vhost waiting).
Here the same route is run as a resumable computation, a meter's worth of steps at a time,
and the tests check three things: no slice examines more trie nodes than its allowance (plus
one chunk), counted by wrapping the trie's step function itself rather than trusting the
meter; the synchronous attempt never overdraws its meter; and every way of routing gives the
queues a plain recursive matcher gives, on random small graphs.
"""

import itertools
import random

import pytest
from hutch_broker.model import budgets, routing, topics
from hutch_broker.model.messages import Message
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import properties

TURN_STEPS = 5_000  # dispatch.turns.TURN_STEPS: one loop turn's allowance


def message(key: str, headers: dict | None = None) -> Message:
    raw = b"\x00\x00" if headers is None else properties.encode_properties(headers=headers)
    return Message("x", key, raw, b"body", persistent=False)


def words_of(key: str) -> list[str]:
    return key.split(".") if key else []


def reference(pattern: list[str], words: list[str]) -> bool:
    """The definition of a topic match, as directly as possible (small sizes only)."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference(rest, words[skip:]) for skip in range(len(words) + 1))
    if not words:
        return False
    return head in ("*", words[0]) and reference(rest, words[1:])


def pathological() -> tuple[VirtualHost, object]:
    """The issue's graph: 6,561 bindings to 4 queues, plus one exact and one impossible key."""
    vhost = VirtualHost("/")
    exchange, _ = vhost.declare_exchange("t", "topic")
    queues = [vhost.declare_queue(f"q{index}")[0] for index in range(4)]
    for index, words in enumerate(itertools.product("a*#", repeat=8)):
        vhost.bind("t", queues[index % 4], ".".join(words))
    vhost.bind("t", vhost.declare_queue("none")[0], "a.a.a.a.a.a.a.a")  # never 127 words
    return vhost, exchange


def attack_key(seed: int) -> str:
    rng = random.Random(seed)
    return ".".join(rng.choice("ab") for _ in range(127))


@pytest.fixture
def counted_nodes(monkeypatch):
    """Every trie node any matcher examines, counted where it is examined."""
    seen = [0]
    real_step = topics._step

    def counting_step(active, word):
        seen[0] += len(active)
        return real_step(active, word)

    monkeypatch.setattr(topics, "_step", counting_step)
    return seen


def test_the_pathological_route_runs_in_bounded_slices(counted_nodes):
    vhost, exchange = pathological()
    key = attack_key(1)
    run = budgets.Resumable(routing.route_steps(vhost, exchange, [key], message(key)))
    slices, largest = 0, 0
    while True:
        before = counted_nodes[0]
        done = run.advance(budgets.Meter(TURN_STEPS))
        largest = max(largest, counted_nodes[0] - before)
        slices += 1
        if done:
            break

    assert counted_nodes[0] > 50 * TURN_STEPS, "the case is as expensive as the issue says"
    assert largest <= TURN_STEPS + budgets.CHUNK
    assert slices >= counted_nodes[0] // (TURN_STEPS + budgets.CHUNK)
    assert sorted(queue.name for queue in run.result) == ["q0", "q1", "q2", "q3"]


def test_the_synchronous_attempt_stops_before_overdrawing_its_meter(counted_nodes):
    vhost, exchange = pathological()
    key = attack_key(2)
    meter = budgets.Meter(TURN_STEPS)

    with pytest.raises(budgets.OverBudgetError):
        routing.route(vhost, exchange, [key], message(key), meter)

    assert meter.left >= 0
    assert counted_nodes[0] <= TURN_STEPS


def test_keys_differing_only_in_unbound_words_reuse_the_memoised_transitions(counted_nodes):
    """The common case: '#' bindings and keys carrying ids.  After the first key, a key
    whose other words no binding names walks known transitions only: no trie node."""
    vhost = VirtualHost("/")
    exchange, _ = vhost.declare_exchange("t", "topic")
    for index, pattern in enumerate(["orders.#", "#.error", "*.eu.#", "orders.*.eu.created"]):
        vhost.bind("t", vhost.declare_queue(f"q{index}")[0], pattern)
    first = "orders.1001.eu.created"
    routing.route(vhost, exchange, [first], message(first))
    before = counted_nodes[0]
    found = {
        key: sorted(queue.name for queue in routing.route(vhost, exchange, [key], message(key)))
        for key in (f"orders.{order}.eu.created" for order in range(1002, 1100))
    }

    assert counted_nodes[0] == before
    assert set(map(tuple, found.values())) == {("q0", "q3")}


def test_the_automaton_stays_within_its_bounds():
    trie: topics.TopicTrie[str] = topics.TopicTrie()
    for index, words in enumerate(itertools.product("a*#", repeat=6)):
        trie.add(".".join(words), f"q{index % 3}")
    for seed in range(60):
        trie.match(attack_key(seed))
        automaton = trie._automaton
        assert automaton is not None
        assert automaton.size <= automaton.limit
        assert len(automaton.states) <= topics.MAX_STATES
    trie.add("b.b", "q9")
    assert trie._automaton is None, "a binding change drops the memoised transitions"


def test_headers_and_fanout_scans_are_sliced_too():
    vhost = VirtualHost("/")
    headers, _ = vhost.declare_exchange("h", "headers")
    fanout, _ = vhost.declare_exchange("f", "fanout")
    queues = [vhost.declare_queue(f"q{index}")[0] for index in range(3000)]
    for index, queue in enumerate(queues):
        vhost.bind("h", queue, "", {"x-match": "all", "k": index % 7})
        vhost.bind("f", queue, "")
    for exchange, expected in ((headers, 3000 // 7 + 1), (fanout, 3000)):
        msg = message("k", {"k": 0})
        with pytest.raises(budgets.OverBudgetError):
            routing.route(vhost, exchange, ["k"], msg, budgets.Meter(1000))
        run = budgets.Resumable(routing.route_steps(vhost, exchange, ["k"], msg))
        slices = 0
        while not run.advance(budgets.Meter(1000)):
            slices += 1
        assert slices >= 2
        assert len(run.result) == expected
        assert run.result == routing.route(vhost, exchange, ["k"], msg)


# -- every way of routing agrees with the definition, on random small graphs ------------------

WORDS = ["a", "b", ""]
PATTERN_WORDS = [*WORDS, "*", "#"]


def _random_pattern(rng: random.Random) -> str:
    return ".".join(rng.choice(PATTERN_WORDS) for _ in range(rng.randint(1, 5)))


def _random_key(rng: random.Random) -> str:
    return ".".join(rng.choice(WORDS) for _ in range(rng.randint(0, 7)))


def _all_ways(vhost, exchange, keys, rng):
    msg = message(keys[0])
    plain = routing.route(vhost, exchange, keys, msg)
    run = budgets.Resumable(routing.route_steps(vhost, exchange, keys, msg))
    while not run.advance(budgets.Meter(rng.randint(1, 40))):
        pass
    try:
        metered = routing.route(vhost, exchange, keys, msg, budgets.Meter(rng.randint(1, 60)))
    except budgets.OverBudgetError:
        metered = plain
    return plain, run.result, metered


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_route_as_the_definition_says_however_sliced(seed):
    rng = random.Random(seed)
    vhost = VirtualHost("/")
    exchange, _ = vhost.declare_exchange("t", "topic")
    inner, _ = vhost.declare_exchange("inner", "topic")  # an exchange-to-exchange hop
    vhost.bind("t", inner, rng.choice(["#", "a.#", "*"]))
    bound: dict[str, list[str]] = {}
    for index in range(12):
        name = f"q{index:02}"
        queue, _ = vhost.declare_queue(name)
        source = rng.choice(["t", "inner"])
        pattern = _random_pattern(rng)
        vhost.bind(source, queue, pattern)
        bound[name] = [source, pattern]
    hop = vhost.exchanges["t"].bindings
    hop_pattern = next(iter(hop.values())).routing_key
    for round_ in range(30):
        keys = [_random_key(rng) for _ in range(rng.randint(1, 3))]
        # Every exchange reached tries every key (RabbitMQ's rule for CC/BCC).
        hop_taken = any(reference(words_of(hop_pattern), words_of(key)) for key in keys)
        expected = sorted(
            name
            for name, (source, pattern) in bound.items()
            if (source == "t" or hop_taken)
            and any(reference(words_of(pattern), words_of(key)) for key in keys)
        )
        for found in _all_ways(vhost, exchange, keys, rng):
            assert sorted(queue.name for queue in found) == expected, (keys, bound)
        if round_ % 10 == 9:  # change the bindings: the memoised transitions must go
            name = rng.choice(sorted(bound))
            source, pattern = bound[name]
            vhost.unbind(source, vhost.queues[name], pattern)
            bound[name] = [source, _random_pattern(rng)]
            vhost.bind(source, vhost.queues[name], bound[name][1])
