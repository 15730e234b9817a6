"""Adversarial topic bindings and policy patterns, side by side (issue "Broker trust" items 6, 7).

hutch-broker now matches topics with a bounded NFA walk and policy patterns with a bounded regex
engine; these scenarios check that the rewrite routes and applies policies exactly as RabbitMQ
3.10.8 does. The sizes stay small because RabbitMQ's own trie walk is still exponential in `#`.
"""

import re

import pytest
from hutch_testing.steps import get, ready

pytestmark = pytest.mark.rabbitmq

BINDINGS = {
    "hashes": "#.#.#.#.#.#.x",
    "hash-words": "#.a.#.a.#.x",
    "stars-around-hash": "*.#.*",
    "everything": "#",
    "one-word": "*",
    "empty-word": "a..b",
    "hash-pair": "#.#",
    "trailing-empty": "#.",
}
# The empty routing key is zero words on both: only `#` and `#.#` take it.
KEYS = [
    ".".join(["a"] * 12),
    ".".join(["a"] * 12 + ["x"]),
    ".".join(["a", "b"] * 5 + ["x"]),
    ".",
    "a..b",
    "x",
    "a.",
    "a.x",
    "",
]


def _bodies(channel, queue):
    found = []
    while (got := get(channel, queue)) is not None:
        found.append(got[2].decode())
    return found


def test_adversarial_topic_bindings_route_identically(target):
    ch = target.channel()
    n = target.name
    ch.exchange_declare(n("t"), "topic")
    for label, binding_key in BINDINGS.items():
        ch.queue_declare(n(label))
        ch.queue_bind(n(label), n("t"), binding_key)

    for key in KEYS:
        ch.basic_publish(n("t"), key, key.encode())

    got = {label: _bodies(ch, n(label)) for label in BINDINGS}
    a12, a12x = KEYS[0], KEYS[1]
    assert got == {
        "hashes": [a12x, KEYS[2], "x", "a.x"],
        "hash-words": [a12x, KEYS[2]],
        "stars-around-hash": [a12, a12x, KEYS[2], ".", "a..b", "a.", "a.x"],
        "everything": KEYS,
        "one-word": ["x"],
        "empty-word": ["a..b"],
        "hash-pair": KEYS,
        "trailing-empty": [".", "a."],
    }


def test_nested_quantifier_pattern_applies_where_it_matches(target):
    """Observed through its effect (max-length 1), not the management stats, which lag."""
    n = target.name
    pattern = "^" + re.escape(n("")) + "(a+)+$"
    target.api.set_policy(n("nested"), pattern, {"max-length": 1})
    ch = target.channel()
    suffixes = ("a" * 20, "a" * 20 + "-", "ab")
    for suffix in suffixes:
        ch.queue_declare(n(suffix))
        for body in ("one", "two"):
            ch.basic_publish("", n(suffix), body.encode())

    assert {suffix: ready(ch, n(suffix)) for suffix in suffixes} == {
        "a" * 20: 1,
        "a" * 20 + "-": 2,
        "ab": 2,
    }
