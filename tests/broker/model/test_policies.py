"""Pure policy logic: validation texts (POL-8), matching (POL-2), merging (POL-5, POL-6)."""

import pytest
from hutch_broker.model import policies, settings


def test_validation_messages():
    assert policies.validate({"pattern": ".*", "definition": {"max-length": -1}}, operator=False)[
        1
    ] == ("-1 is not a valid maximum length")
    assert policies.validate({"pattern": ".*", "definition": {"no-such-key": 1}}, operator=False)[
        1
    ] == ('[{<<"no-such-key">>,1}] are not recognised policy settings')
    assert (
        policies.validate({"pattern": ".*", "definition": {}}, operator=False)[1]
        == "no policy provided"
    )
    detail = policies.validate({"pattern": "(", "definition": {"max-length": 1}}, operator=False)[1]
    assert detail.startswith("pattern should be regular expression but is invalid")
    assert (
        policies.validate({"pattern": ".*", "definition": {"ring-size": 0}}, operator=False)[1]
        == "0 is not a valid ring size"
    )
    assert policies.validate(
        {"pattern": ".*", "definition": {"max-length": 1}, "apply-to": "x"}, operator=False
    )[1].startswith("apply-to 'x' unrecognised")


def test_operator_policies_refuse_user_only_keys():
    _, detail = policies.validate(
        {"pattern": ".*", "definition": {"overflow": "reject-publish"}}, operator=True
    )
    assert detail == '[{<<"overflow">>,<<"reject-publish">>}] are not recognised policy settings'
    parsed, detail = policies.validate(
        {"pattern": ".*", "definition": {"max-length": 3, "ring-size": 2}}, operator=True
    )
    assert detail is None and parsed is not None


@pytest.mark.parametrize(
    ("definition", "detail"),
    [
        ({"max-age": "0D"}, '<<"0D">> is not a valid max age'),
        ({"max-age": "7"}, '<<"7">> is not a valid max age'),
        ({"max-age": "1d"}, '<<"1d">> is not a valid max age'),
        ({"max-age": "x"}, '<<"x">> is not a valid max age'),  # 3.10.8: 500
        ({"max-age": ""}, "<<>> is not a valid max age"),  # 3.10.8: 500
        ({"max-age": 5}, "5 is not a valid max age"),  # 3.10.8: 500
        ({"max-age": ["1D"]}, '[<<"1D">>] is not a valid max age'),  # 3.10.8: stored
        ({"max-age": "1D"}, None),
        ({"max-age": "07D"}, None),
        ({"stream-max-segment-size-bytes": -1}, "-1 is not a valid segment size"),
        ({"stream-max-segment-size-bytes": "1"}, '<<"1">> is not a valid segment size'),
        ({"stream-max-segment-size-bytes": 1.5}, "1.5 is not a valid segment size"),
        ({"stream-max-segment-size-bytes": True}, "true is not a valid segment size"),
        ({"stream-max-segment-size-bytes": 0}, None),
    ],
)
def test_stream_retention_keys_are_validated(definition, detail):
    assert policies.validate({"pattern": ".*", "definition": definition}, operator=False)[1] == (
        detail
    )


@pytest.mark.parametrize("key", ["ha-mode", "ha-params", "ha-sync-mode", "target-group-size"])
def test_operator_policies_refuse_keys_rabbitmq_does_not_recognise(key):
    _, detail = policies.validate({"pattern": ".*", "definition": {key: 2}}, operator=True)
    assert detail == f'[{{<<"{key}">>,2}}] are not recognised policy settings'


def make(name, pattern, priority=0, apply_to="all", **definition):
    return policies.Policy("/", name, pattern, definition, priority, apply_to)


def test_best_match_priority_unanchored_and_apply_to():
    pols = [make("low", "pol", 1, **{"max-length": 1}), make("high", "app", 5, **{"max-length": 2})]
    assert policies.best_match(pols, "app.pol", "queue").name == "high"
    assert policies.best_match(pols, "x.pol.y", "queue").name == "low"  # unanchored
    assert policies.best_match([make("ex", ".*", apply_to="exchanges")], "q", "queue") is None
    assert policies.best_match([make("qq", ".*", apply_to="quorum_queues")], "q", "queue") is None
    ties = [make("b", ".*", 1), make("a", ".*", 1)]
    assert policies.best_match(ties, "q", "queue").name == "a"


def test_merge_lesser_wins():
    merged = settings.merge_policies(
        {"max-length": 5, "message-ttl": 100, "overflow": "reject-publish"},
        {"max-length": 3, "message-ttl": 1000, "expires": 60000},
    )
    assert merged == {
        "max-length": 3,
        "message-ttl": 100,
        "overflow": "reject-publish",
        "expires": 60000,
    }


@pytest.mark.parametrize(
    ("arguments", "policy", "operator", "expected"),
    [
        ({"x-max-length": 4}, {"max-length": 2}, None, {"max_length": 2}),
        ({"x-max-length": 4}, {"max-length": 9}, None, {"max_length": 4}),
        ({}, {"max-length": 5}, {"max-length": 3}, {"max_length": 3}),
        (
            {"x-overflow": "reject-publish"},
            {"overflow": "drop-head"},
            None,
            {"overflow": "reject-publish"},
        ),
        (
            {"x-dead-letter-exchange": "a"},
            {"dead-letter-exchange": "b"},
            None,
            {"dead_letter_exchange": "a"},
        ),
        ({}, {"dead-letter-exchange": "b"}, None, {"dead_letter_exchange": "b"}),
        ({"x-ring-size": 10}, {"ring-size": 3}, None, {"ring_size": 10}),
        ({}, {"ring-size": 3}, {"ring-size": 2}, {"ring_size": 2}),
        ({"x-ring-size": 10}, None, {"ring-size": 4}, {"ring_size": 4}),
        ({"x-message-ttl": 100}, None, {"message-ttl": 50}, {"message_ttl": 50}),
    ],
)
def test_effective_settings(arguments, policy, operator, expected):
    result = settings.effective(arguments, policy, operator)
    for key, value in expected.items():
        assert getattr(result, key) == value
