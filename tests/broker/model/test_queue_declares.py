"""The pure rules of a queue declare (model/queuedeclares.py), with plain values.

The declare's behaviour over AMQP and HTTP is pinned side by side with RabbitMQ 3.10.8
(tests/sidebyside) and through ``VirtualHost.declare_queue`` in the model tests; these pin the
split: each rule raises RabbitMQ's code and text, first failure first, and changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from hutch_broker.model import queuedeclares
from hutch_broker.model.queues import Queue
from hutch_broker.protocol.errors import AMQPError

NEW: dict[str, Any] = {"durable": True, "exclusive": False, "auto_delete": False}


def refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(AMQPError) as caught:
        call(*args, **kwargs)
    return caught.value.reply_code, caught.value.reply_text


def test_q_3_a_reserved_name_is_refused_before_its_arguments() -> None:
    code, text = refusal(
        queuedeclares.check_new, "/", "amq.q", {"x-max-length": -1}, generated=False, **NEW
    )
    assert code == 403 and "reserved prefix 'amq.*'" in text


def test_a_generated_name_is_not_reserved_and_a_classic_queue_is_no_stream() -> None:
    assert queuedeclares.check_new("/", "amq.gen-x", {}, generated=True, **NEW) is False


def test_q_3_a_bad_argument_is_refused_with_406() -> None:
    code, text = refusal(
        queuedeclares.check_new, "/", "q", {"x-max-length": -1}, generated=False, **NEW
    )
    assert code == 406 and "x-max-length" in text


def test_a_stream_must_be_durable_and_is_reported_as_a_stream() -> None:
    stream = {"x-queue-type": "stream"}
    assert queuedeclares.check_new("/", "s", stream, generated=False, **NEW) is True
    code, text = refusal(
        queuedeclares.check_new, "/", "s", stream, generated=False, **{**NEW, "durable": False}
    )
    assert code == 406 and "invalid property 'non-durable'" in text


def test_q_2_a_redeclare_checks_owner_then_flags_then_arguments() -> None:
    owner = object()
    queue = Queue("q", durable=True, exclusive_owner=owner, arguments={"x-max-length": 5})
    same = {"durable": True, "auto_delete": False, "arguments": {"x-max-length": 5}}
    queuedeclares.check_equivalent("/", queue, exclusive_owner=owner, **same)
    assert (
        refusal(queuedeclares.check_equivalent, "/", queue, exclusive_owner=None, **same)[0] == 405
    )
    code, text = refusal(
        queuedeclares.check_equivalent,
        "/",
        queue,
        exclusive_owner=owner,
        **{**same, "durable": False, "arguments": {}},
    )
    assert code == 406 and "'durable'" in text
    code, text = refusal(
        queuedeclares.check_equivalent,
        "/",
        queue,
        exclusive_owner=owner,
        **{**same, "arguments": {"x-max-length": 6}},
    )
    assert code == 406 and "x-max-length" in text


def test_the_default_type_applies_to_a_new_queue_that_suits_it_and_an_existing_keeps_its_own() -> (
    None
):
    typed = queuedeclares.typed_arguments
    assert typed("quorum", {}, None, generated=False, **NEW) == {"x-queue-type": "quorum"}
    assert typed("quorum", {}, None, generated=True, **NEW) == {}
    assert typed("classic", {}, None, generated=False, **NEW) == {}
    existing = Queue("q", durable=True, arguments={"x-queue-type": "stream"})
    assert typed("quorum", {}, existing, generated=False, **NEW) == {"x-queue-type": "stream"}
    assert typed("quorum", {"x-queue-type": "classic"}, None, generated=False, **NEW) == {
        "x-queue-type": "classic"
    }
