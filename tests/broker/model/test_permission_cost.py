"""Permission regexes are searched with bounded cost, like policy patterns (issue 11, Cost).

A permission of ``^(a+)+$`` used Python's backtracking ``re``: every access check against a
name like ``aaa…a-`` doubled in cost per character and froze the broker. The cost is counted
in the automaton's units (as in test_pattern_cost.py), not timed: linear in the name.
"""

from hutch_broker.model import access, automata


def test_a_nested_quantifier_permission_costs_bounded_time():
    permission = access.Permission("^(a+)+$", "^(a+)+$", "^(a+)+$")
    matcher = permission._compiled["configure"]
    assert isinstance(matcher, automata.Automaton)
    program = matcher.program
    per_character = (
        automata.STEP_UNITS
        + automata.INSTRUCTION_UNITS * 3 * len(program.ops)
        + automata.TEST_UNITS * (len(program.tests) + 1)
    )
    name = "a" * 40 + "-"
    search = matcher.begin(name)
    spent = search.advance()
    assert search.result is False
    assert spent <= (len(name) + 1) * per_character
    assert not permission.allows("configure", name)
    assert permission.allows("configure", "a" * 40)


def test_permission_semantics_are_unchanged():
    permission = access.Permission("^app\\.", ".*", "")
    assert permission.allows("configure", "app.orders")
    assert not permission.allows("configure", "other.app.orders")
    assert permission.allows("write", "anything")
    assert not permission.allows("read", "anything"), "an empty pattern grants nothing"


def test_backtracking_only_features_are_refused_with_a_reason():
    assert access.validate_pattern("^(a)\\1$") is not None
    assert access.validate_pattern("(") is not None
    assert access.validate_pattern("^q-[0-9]+$") is None
