"""Request-body rules: RabbitMQ's leniency (empty body, "true") and its key_missing errors."""

import pytest
from hutch_broker.admin import bodies, errors


@pytest.mark.parametrize("raw", [b"", b"  ", b"null", b"undefined", b"true"])
def test_empty_bodies_are_empty_objects(raw):
    assert bodies.parse_json(raw) == {}


@pytest.mark.parametrize("raw", [b"{", b"[1]", b"3", b"\xff"])
def test_not_json(raw):
    with pytest.raises(errors.ApiError) as caught:
        bodies.parse_json(raw)
    assert caught.value.body == {"error": "bad_request", "reason": "not_json"}


def test_doubly_encoded_json_is_named():
    with pytest.raises(errors.ApiError, match="doubly-JSON-encoded"):
        bodies.parse_json(b'"{}"')


def test_booleans_accept_strings():
    assert bodies.boolean({"durable": "false"}, "durable", True) is False
    assert bodies.boolean({}, "durable", True) is True
    with pytest.raises(errors.ApiError, match="durable must be a boolean"):
        bodies.boolean({"durable": 1}, "durable", True)


def test_missing_required_key_is_key_missing():
    with pytest.raises(errors.ApiError) as caught:
        bodies.string({}, "type")
    assert caught.value.body["reason"] == "[{key_missing,type}]"


def test_tables_and_integers():
    assert bodies.table({}, "arguments") == {}
    with pytest.raises(errors.ApiError):
        bodies.table({"arguments": []}, "arguments")
    assert bodies.integer({"count": "3"}, "count", minimum=1) == 3
    with pytest.raises(errors.ApiError):
        bodies.integer({"count": 0}, "count", minimum=1)
    with pytest.raises(errors.ApiError):
        bodies.integer({"count": True}, "count", minimum=0)


def test_tags():
    assert bodies.tags("a, b,,") == ["a", "b"]
    assert bodies.tags(["administrator"]) == ["administrator"]
    assert bodies.tags(None) == []
    with pytest.raises(errors.ApiError):
        bodies.tags([1])
