"""Permission regexes are searched with bounded cost, like policy patterns (issue 11, Cost).

A permission of ``^(a+)+$`` used Python's backtracking ``re``: every access check against a
name like ``aaa…a-`` doubled in cost per character and froze the broker.
"""

import time

from hutch_broker.model import access


def test_a_nested_quantifier_permission_costs_bounded_time():
    permission = access.Permission("^(a+)+$", "^(a+)+$", "^(a+)+$")
    began = time.perf_counter()
    allowed = permission.allows("configure", "a" * 40 + "-")
    assert not allowed
    assert time.perf_counter() - began < 0.2
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
