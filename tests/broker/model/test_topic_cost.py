"""Topic matching costs words x trie nodes, never exponential (issue "Broker trust" item 6).

A binding such as `#.#.#.#.#.#.x` and one long routing key used to freeze the broker for
seconds (minutes with more `#` words), because each `#` tried every split of the key. The
cost is counted, not timed: the trie charges a ``budgets.Meter`` for each node it examines, and
a match may examine each trie node at most three times per word (the active nodes, the nodes
reached, the `#` closure) and once more for the targets. The random tables hold the bounded
matcher to a plain recursive reference on small sizes.
"""

import random

import pytest
from hutch_broker.model import budgets, topics
from hutch_broker.model.messages import Message
from hutch_broker.model.vhosts import VirtualHost


def routed(vhost, exchange, key):
    message = Message(exchange.name, key, b"\x00\x00", b"body", persistent=False)
    return sorted(queue.name for queue in vhost.route(exchange, [key], message))


def words_of(key: str) -> list[str]:
    """RabbitMQ's split: the empty key is zero words."""
    return key.split(".") if key else []


def reference(pattern: list[str], words: list[str]) -> bool:
    """The definition, written as directly as possible (exponential, so small sizes only)."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference(rest, words[skip:]) for skip in range(len(words) + 1))
    if not words:
        return False
    return head in ("*", words[0]) and reference(rest, words[1:])


A45, A60, A127 = (".".join(["a"] * count) for count in (45, 60, 127))  # 127: most in 255 bytes
ONE_CHAR_WORDS = ".".join("abcdefghij"[index % 10] for index in range(200))
EMPTY_WORDS = "." * 200  # 201 empty words


def counted(exchange, key: str) -> tuple[int, int]:
    """Steps a first (uncached) match of ``key`` costs, and the bound for this trie and key."""
    trie = exchange._trie
    meter = budgets.unlimited()
    allowance = meter.left
    trie.match_within(key, meter)
    return allowance - meter.left, (len(words_of(key)) + 1) * 3 * trie._node_count


@pytest.mark.parametrize(
    ("binding_key", "routing_key", "matches"),
    [
        pytest.param("#.#.#.#.#.#.x", A45, False, id="reported-freeze"),
        pytest.param("#.#.#.#.#.#.x", A45 + ".x", True, id="reported-freeze-matching"),
        pytest.param("#.#.#.#.#.#.#.#.x", A60, False, id="8-hashes-60-words"),
        pytest.param("#.#.#.#.#.#.#.#.x", A127, False, id="8-hashes-127-words"),
        pytest.param("#.a.#.a.#.a.#.a.#.b", A127, False, id="hash-word-chain"),
        pytest.param("#.*.#.*.#.*.#.*.#.x", A127, False, id="hash-star-chain"),
        pytest.param(".".join(["#"] * 127), A127, True, id="127-hashes"),
        pytest.param("#.#.#.x", ONE_CHAR_WORDS, False, id="200-one-char-words"),
        pytest.param("#.#.#.j", ONE_CHAR_WORDS, True, id="200-one-char-words-matching"),
        pytest.param("#.#.#.#.x", EMPTY_WORDS, False, id="201-empty-words"),
        pytest.param("#.#.#.#.", EMPTY_WORDS, True, id="201-empty-words-matching"),
    ],
)
def test_adversarial_bindings_route_in_bounded_time(binding_key, routing_key, matches):
    vhost = VirtualHost("/")
    exchange, _ = vhost.declare_exchange("t", "topic")
    queue, _ = vhost.declare_queue("q")
    vhost.bind("t", queue, binding_key)

    steps, bound = counted(exchange, routing_key)

    assert steps <= bound
    assert routed(vhost, exchange, routing_key) == (["q"] if matches else [])


def test_many_adversarial_bindings_on_one_exchange_stay_bounded():
    vhost = VirtualHost("/")
    exchange, _ = vhost.declare_exchange("t", "topic")
    for index in range(50):
        queue, _ = vhost.declare_queue(f"q{index}")
        vhost.bind("t", queue, ".".join(["#"] * (index % 9 + 1) + [f"w{index}"]))
    key = ".".join(["a"] * 80 + ["w7"])

    steps, bound = counted(exchange, key)

    assert steps <= bound
    assert routed(vhost, exchange, key) == ["q7"]


WORDS = ["a", "b", ""]
PATTERN_WORDS = [*WORDS, "*", "#"]


def _random_pattern(rng: random.Random) -> str:
    return ".".join(rng.choice(PATTERN_WORDS) for _ in range(rng.randint(1, 5)))


def _random_key(rng: random.Random) -> str:
    return ".".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))


@pytest.mark.parametrize("seed", range(20))
def test_random_bindings_match_the_reference(seed):
    rng = random.Random(seed)
    vhost = VirtualHost("/")
    exchange, _ = vhost.declare_exchange("t", "topic")
    patterns = sorted({_random_pattern(rng) for _ in range(12)})
    for index, pattern in enumerate(patterns):
        queue, _ = vhost.declare_queue(f"q{index:02}")
        vhost.bind("t", queue, pattern)
    for _ in range(40):
        key = _random_key(rng)
        expected = [
            f"q{index:02}"
            for index, pattern in enumerate(patterns)
            if reference(words_of(pattern), words_of(key))
        ]
        assert routed(vhost, exchange, key) == expected, (key, patterns)


@pytest.mark.parametrize("seed", range(10))
def test_unbinding_keeps_the_trie_matching_the_reference(seed):
    rng = random.Random(1000 + seed)
    vhost = VirtualHost("/")
    exchange, _ = vhost.declare_exchange("t", "topic")
    queue, _ = vhost.declare_queue("q")
    bound = {_random_pattern(rng) for _ in range(10)}
    for pattern in bound:
        vhost.bind("t", queue, pattern)
    for pattern in rng.sample(sorted(bound), k=len(bound) // 2):
        vhost.unbind("t", queue, pattern)
        bound.discard(pattern)
    for _ in range(40):
        key = _random_key(rng)
        matches = any(reference(words_of(pattern), words_of(key)) for pattern in bound)
        assert routed(vhost, exchange, key) == (["q"] if matches else []), (key, bound)


def test_trie_prunes_hash_edges_on_remove():
    trie: topics.TopicTrie[str] = topics.TopicTrie()
    trie.add("a.#.#", "q")
    trie.add("a.#", "r")
    trie.remove("a.#.#", "q")
    assert trie.match("a.b") == ["r"]
    trie.remove("a.#", "r")
    assert trie.root.children == {}
    assert trie.match("a") == []


def test_a_queue_bound_by_two_keys_is_routed_once():
    trie: topics.TopicTrie[str] = topics.TopicTrie()
    for key in ("#", "a.#", "*.b", "a.b", "#.#.b"):
        trie.add(key, "q")
    assert trie.match("a.b") == ["q"]
