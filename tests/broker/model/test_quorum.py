"""Quorum-queue rules without a broker: declare checks, the delivery count and its limit.

The side-by-side suite (tests/sidebyside/test_quorum_queues.py) holds these to RabbitMQ 3.10.8
over AMQP; here the same rules are pinned on the model with explicit time and no sockets.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hutch_broker.model import arguments, policies, quorum, settings
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Queue
from hutch_broker.protocol import errors, properties

QUORUM = {"x-queue-type": "quorum"}


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        ({"durable": False, "exclusive": True, "auto_delete": True}, "auto-delete"),
        ({"durable": False, "exclusive": True, "auto_delete": False}, "exclusive-owner"),
        ({"durable": False, "exclusive": False, "auto_delete": False}, "non-durable"),
    ],
)
def test_properties_are_refused_in_rabbitmqs_order(flags: dict[str, bool], refused: str) -> None:
    with pytest.raises(errors.AMQPError, match=f"invalid property '{refused}' for queue 'q'"):
        arguments.check_replicated_properties(
            quorum.TYPE_MODULE, "q", "/", generated=False, **flags
        )
    arguments.check_replicated_properties(
        quorum.TYPE_MODULE,
        "q",
        "/",
        durable=True,
        exclusive=False,
        auto_delete=False,
        generated=False,
    )


@pytest.mark.parametrize("arg", quorum.REFUSED_ARGUMENTS)
def test_other_queue_types_arguments_are_refused(arg: str) -> None:
    with pytest.raises(errors.AMQPError, match=r"of queue type rabbit_quorum_queue$"):
        quorum.check_arguments("q", "/", {**QUORUM, arg: 1})


@pytest.mark.parametrize(
    ("count", "limit", "dead"),
    [(1, 0, True), (2, 2, False), (3, 2, True), (9, None, False), (1, -1, False), (99, -5, False)],
)
def test_a_return_past_the_limit_dead_letters(count: int, limit: int | None, dead: bool) -> None:
    assert quorum.exceeds_limit(count, limit) is dead


def test_returns_count_go_to_the_back_and_dead_letter_without_the_count() -> None:
    raw = properties.encode_properties(headers={"h": 1})
    queue = Queue(
        "q",
        durable=True,
        arguments={**QUORUM, "x-delivery-limit": 1, "x-dead-letter-exchange": "dlx"},
    )
    dead: list[tuple[str, Message]] = []

    def dead_letter(_queue: object, entry: Entry, reason: str, settled: Callable[[], None]) -> None:
        dead.append((reason, entry.message))
        settled()

    queue.on_dead_letter = dead_letter
    for body in (b"a", b"b"):
        queue.publish(Message("", "q", raw, body), now_ms=0)

    first = queue.get(0, no_ack=False)
    assert first is not None
    queue.requeue(first)
    order = [entry.message.body for entry in queue.ready_entries()]
    again = queue.get(0, no_ack=False)  # "b"
    assert again is not None
    queue.requeue(again)
    last = [queue.get(0, no_ack=False) for _ in range(2)]
    counts = [properties.decode_properties(e.message.raw_properties)["headers"] for e in last if e]
    for entry in last:
        assert entry is not None
        queue.requeue(entry)  # the second return of each: past the limit of 1

    assert order == [b"b", b"a"]
    assert counts == [{"x-delivery-count": 1, "h": 1}, {"x-delivery-count": 1, "h": 1}]
    assert [(reason, m.body) for reason, m in dead] == [
        ("delivery_limit", b"a"),
        ("delivery_limit", b"b"),
    ]
    assert [properties.decode_properties(m.raw_properties)["headers"] for _, m in dead] == [
        {"h": 1}
    ] * 2
    assert queue.ready_count == 0


@pytest.mark.parametrize(
    ("apply_to", "classic", "quorum_queue"),
    [("all", True, True), ("queues", True, True), ("classic_queues", True, False),
     ("quorum_queues", False, True), ("exchanges", False, False)],
)  # fmt: skip
def test_apply_to_tells_queue_types_apart(apply_to: str, classic: bool, quorum_queue: bool) -> None:
    policy = policies.Policy("p", "/", ".*", {}, 0, apply_to)
    assert policy.matches("q", policies.queue_kind(False)) is classic
    assert policy.matches("q", policies.queue_kind(True)) is quorum_queue


def test_a_classic_queue_requeues_in_place_and_adds_no_header() -> None:
    queue = Queue("q", arguments={"x-delivery-limit": 0})
    for body in (b"a", b"b"):
        queue.publish(Message("", "q", properties.encode_properties(), body), now_ms=0)
    first = queue.get(0, no_ack=False)
    assert first is not None
    queue.requeue(first)

    assert [entry.message.body for entry in queue.ready_entries()] == [b"a", b"b"]
    assert "headers" not in properties.decode_properties(first.message.raw_properties)


@pytest.mark.parametrize(
    ("arguments", "deliveries"),
    [({}, quorum.DEFAULT_DELIVERY_LIMIT + 1), ({"x-delivery-limit": -1}, None)],
)
def test_the_default_limit_is_20_and_a_negative_one_is_none(
    arguments: dict[str, int], deliveries: int | None
) -> None:
    queue = Queue("q", durable=True, arguments={**QUORUM, **arguments})
    queue.publish(Message("", "q", properties.encode_properties(), b"m"), now_ms=0)
    count = 0
    while count < 50 and (entry := queue.get(0, no_ack=False)) is not None:
        count += 1
        queue.requeue(entry)
    assert count == (deliveries or 50)


@pytest.mark.parametrize(
    ("argument", "policy", "limit"),
    [(5, 3, 3), (3, 5, 3), (-1, 3, 3), (3, -1, 3), (-1, -2, -1), (None, 4, 4), (None, None, None)],
)
def test_argument_and_policy_the_lesser_wins_and_a_negative_one_yields(
    argument: int | None, policy: int | None, limit: int | None
) -> None:
    arguments = {} if argument is None else {"x-delivery-limit": argument}
    definition = None if policy is None else {"delivery-limit": policy}
    assert settings.effective(arguments, definition, None).delivery_limit == limit
