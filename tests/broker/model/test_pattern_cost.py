"""Policy patterns are searched in bounded time (issue "Broker trust" item 7).

`^(a+)+$` and a queue named 26 `a`s and a `-` froze every connection for 2 s, doubling per
character, because `re` backtracks. The bounded matcher must agree with `re.search` wherever it
accepts a pattern (random tables, seeded), refuse what needs backtracking with a clear detail,
and answer the adversarial cases in time linear in the name. The cost is counted, not timed:
the automaton's search spends units (``automata``: a test, a step computed, a state visited),
and a name of n characters may cost at most n + 1 steps of the program, each no more than
every instruction and test of the program once; backtracking is exponential in n.
"""

import random
import re

import pytest
from hutch_broker.model import automata, patterns, policies


def policy(pattern: str, name: str = "p", priority: int = 0) -> policies.Policy:
    return policies.Policy("/", name, pattern, {"max-length": 1}, priority, "all")


def step_units(matcher: patterns.Matcher) -> int:
    """The most one character can cost: its step computed from scratch, every test passed."""
    assert isinstance(matcher, automata.Automaton)  # what every adversarial pattern compiles to
    program = matcher.program
    return (
        automata.STEP_UNITS
        + automata.INSTRUCTION_UNITS * 3 * len(program.ops)
        + automata.TEST_UNITS * (len(program.tests) + 1)
    )


def costed(matcher: patterns.Matcher, name: str) -> tuple[bool | None, int, int]:
    """The search's result, the units it spent, and the linear bound for this name."""
    search = matcher.begin(name)
    spent = search.advance()
    return search.result, spent, (len(name) + 1) * step_units(matcher)


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        pytest.param("^(a+)+$", "a" * 26 + "-", False, id="reported-freeze"),
        pytest.param("^(a+)+$", "a" * 30 + "-", False, id="nested-plus-30"),
        pytest.param("^(a+)+$", "a" * 254 + "-", False, id="nested-plus-255"),
        pytest.param("^(a+)+$", "a" * 255, True, id="nested-plus-matching"),
        pytest.param("(a|a)*b", "a" * 40, False, id="overlapping-alternation"),
        pytest.param("(a*)*b", "a" * 40, False, id="nested-star"),
        pytest.param("^(a|aa)+$", "a" * 60 + "-", False, id="ambiguous-alternation"),
        pytest.param("(x+x+)+y", "x" * 100, False, id="adjacent-pluses"),
        pytest.param(r"^(\w+\s?)*$", "word " * 40 + "!", False, id="words-and-spaces"),
        pytest.param("a*a*a*a*a*a*b", "a" * 255, False, id="polynomial-degree-6"),
        pytest.param("(.*a){20}", "a" * 19 + "b" * 200, False, id="counted-dot-star"),
        pytest.param("^(a?){30}a{30}$", "a" * 30, True, id="optional-chain"),
        pytest.param("(?:){4294967294}x", "x", True, id="empty-repeated-four-billion-times"),
    ],
)
def test_adversarial_patterns_match_in_bounded_time(pattern, name, matches):
    candidate = policy(pattern)

    result, spent, bound = costed(candidate._matcher, name)

    assert spent <= bound
    assert result is matches
    assert candidate.matches(name, "queue") is matches


def test_the_largest_accepted_program_is_still_bounded():
    matcher = patterns.compile_nfa("(?:a|b|ab|ba)*" * 20 + "c")
    result, spent, bound = costed(matcher, "ab" * 127)
    assert result is False
    assert spent <= bound  # MAX_PROGRAM instructions at most for each of 255 characters


def test_best_match_over_many_adversarial_policies_stays_bounded():
    candidates = [policy("^(a+)+$", f"p{index}", index) for index in range(20)]
    candidates.append(policy("^a", "plain", -1))
    name = "a" * 40 + "-"
    costs = [costed(candidate._matcher, name) for candidate in candidates[:-1]]
    assert all(result is False and spent <= bound for result, spent, bound in costs)
    result = policies.best_match(candidates, name, "queue")
    assert result is not None and result.name == "plain"


@pytest.mark.parametrize(
    ("pattern", "feature"),
    [
        (r"(a)\1", "a backreference"),
        ("(?=a)", "a lookahead or lookbehind"),
        ("(?<=a)b", "a lookahead or lookbehind"),
        ("^(?!tmp)", "a negative lookahead or lookbehind"),
        ("(a)?(?(1)b|c)", "a conditional group"),
        ("(?>a+)b", "an atomic group"),
        ("a++b", "a possessive quantifier"),
    ],
)
def test_patterns_that_need_backtracking_are_refused_with_a_reason(pattern, feature):
    parsed, detail = policies.validate(
        {"pattern": pattern, "definition": {"max-length": 1}}, operator=False
    )
    assert parsed is None
    assert detail == (
        f"pattern uses {feature}, which hutch-broker does not support in policy patterns "
        "(they are matched in linear time, without backtracking)"
    )
    operator_parsed, operator_detail = policies.validate(
        {"pattern": pattern, "definition": {"max-length": 1}}, operator=True
    )
    assert (operator_parsed, operator_detail) == (None, detail)


@pytest.mark.parametrize(
    "pattern",
    ["(", "a{2,1}", "[z-a]", "*a", "a{99999999999}", "(" * 5000 + ")" * 5000, "(?P<x>a)(?P<x>b)"],
)
def test_invalid_patterns_get_rabbitmqs_detail_not_an_exception(pattern):
    parsed, detail = policies.validate(
        {"pattern": pattern, "definition": {"max-length": 1}}, operator=False
    )
    assert parsed is None
    assert detail.startswith("pattern should be regular expression but is invalid: ")


def test_a_pattern_too_large_to_search_quickly_is_refused():
    _, detail = policies.validate(
        {"pattern": "(a{100}){100}", "definition": {"max-length": 1}}, operator=False
    )
    assert detail == (
        f"pattern is too large: it expands to more than {patterns.MAX_PROGRAM} matching steps"
    )


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [  # the patterns the tests, examples, docs and e2e use
        ("^q", "q1", True),
        ("^q", "aq", False),
        ("pol", "app.pol", True),
        (".*", "", True),
        (".", "", False),
        ("^orders", "orders.eu", True),
        (r"^sensor\.", "sensor.1", True),
        (r"^sensor\.", "sensorX1", False),
        ("^chain-1$", "chain-1", True),
        ("^chain-1$", "chain-10", False),
        ("^d", "dlq", True),
        (r"^amq\..*", "amq.gen-1", True),
    ],
)
def test_patterns_in_use_keep_their_meaning(pattern, name, matches):
    assert policy(pattern).matches(name, "queue") is matches
    assert patterns.compile_nfa(pattern).search(name) is matches


# -- random tables: the matcher against re.search ----------------------------------------------

ATOMS = ["a", "b", "-", ".", r"\.", "[ab]", "[^a]", "[a-c_]", r"\w", r"\d", r"\s", r"\W", "A"]
ANCHORS = ["^", "$", r"\b", r"\B", r"\A", r"\Z"]
QUANTIFIERS = ["", "", "*", "+", "?", "*?", "+?", "??", "{2}", "{1,3}", "{0,2}", "{2,}", "{,2}?"]
FLAGS = ["", "", "", "(?i)", "(?s)", "(?m)", "(?a)", "(?x)"]
ALPHABET = "aab-._AB1 \n\u00e9\u0661"  # \u0661 is an Arabic-Indic digit: \d matches it


def _random_term(rng: random.Random, depth: int) -> str:
    """Groups nest one level only: `re` itself is the oracle here, and it backtracks."""
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(ANCHORS)
    if roll < 0.3 and depth == 0:
        inner = "|".join(_random_sequence(rng, depth + 1) for _ in range(rng.randint(1, 3)))
        group = rng.choice(["(", "(?:", "(?i:", "(?s:", "(?-i:"])
        return group + inner + ")" + rng.choice(QUANTIFIERS)
    return rng.choice(ATOMS) + rng.choice(QUANTIFIERS)


def _random_sequence(rng: random.Random, depth: int) -> str:
    return "".join(_random_term(rng, depth) for _ in range(rng.randint(0, 3)))


def _random_pattern(rng: random.Random) -> str:
    return rng.choice(FLAGS) + _random_sequence(rng, 0)


def _random_name(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 7)))


def _too_large(pattern: str) -> bool:
    try:
        patterns.compile_nfa(pattern)
    except patterns.UnsupportedPatternError as exc:
        return str(exc).startswith("is too large")
    return False


@pytest.mark.parametrize("seed", range(20))
def test_random_patterns_agree_with_re_search(seed):
    rng = random.Random(seed)
    checked = 0
    for _ in range(40):
        pattern = _random_pattern(rng)
        try:
            regex = re.compile(pattern)
        except re.error:
            with pytest.raises(patterns.InvalidPatternError):
                patterns.compile_pattern(pattern)
            continue
        if _too_large(pattern):  # nested counted repeats; lookaround is never generated
            continue
        nfa, chosen = patterns.compile_nfa(pattern), patterns.compile_pattern(pattern)
        for _ in range(12):
            name = _random_name(rng)
            expected = regex.search(name) is not None
            assert nfa.search(name) is expected, (pattern, name)
            assert chosen.search(name) is expected, (pattern, name)
            checked += 1
    assert checked > 200  # most random patterns are valid, so the table is not vacuous
