"""model/limits.py: validation with RabbitMQ 3.10.8's texts and the one comparison (issue 14)."""

import pytest
from hutch_broker.model import limits


def test_known_limits_take_any_integer_and_keep_it_as_given():
    assert limits.validate("vhost", "max-queues", 0) == 0
    assert limits.validate("vhost", "max-connections", -5) == -5
    assert limits.validate("user", "max-channels", 10**20) == 10**20


@pytest.mark.parametrize(
    ("kind", "name", "value", "reason"),
    [
        (
            "vhost",
            "max-channels",
            1,
            'Validation failed\n\nUnrecognised terms [{<<"max-channels">>,1}] in limits\n',
        ),
        ("user", "max-queues", 1, 'Unrecognised terms [{<<"max-queues">>,1}] in user-limits'),
        (
            "vhost",
            "max-queues",
            True,
            "Validation failed\n\nmax-queues should be a number, actually was true\n",
        ),
        ("user", "max-channels", 2.0, "max-channels should be a number, actually was 2.0"),
        ("user", "max-connections", None, "max-connections should be a number, actually was null"),
    ],
)
def test_refusals_use_rabbitmqs_texts(kind, name, value, reason):
    with pytest.raises(limits.LimitError) as refused:
        limits.validate(kind, name, value)
    assert str(refused.value) == reason


def test_a_whole_limits_object_is_checked_item_by_item():
    assert limits.validate_all("user", {"max-channels": 3}) == {"max-channels": 3}
    with pytest.raises(limits.LimitError, match="must be a JSON object"):
        limits.validate_all("vhost", [1])


@pytest.mark.parametrize(
    ("limit", "current", "reached"),
    [(None, 10**6, None), (-1, 10**6, None), (0, 0, 0), (2, 1, None), (2, 2, 2), (2, 3, 2)],
)
def test_reached_means_no_room_for_one_more(limit, current, reached):
    held = {} if limit is None else {"max-queues": limit}
    assert limits.reached(held, "max-queues", current) == reached
