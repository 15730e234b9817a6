"""The pure rules of an exchange declare (model/exchangedeclares.py), with plain values.

Over AMQP and HTTP the same refusals are pinned side by side with RabbitMQ 3.10.8; these pin
the order of the checks and that each raises RabbitMQ's code and text and changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from hutch_broker.model import exchangedeclares
from hutch_broker.model.exchanges import make_exchange
from hutch_broker.protocol.errors import AMQPError

SAME: dict[str, Any] = {
    "exchange_type": "topic",
    "durable": True,
    "auto_delete": False,
    "internal": False,
    "arguments": {"alternate-exchange": "ae"},
}


def refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(AMQPError) as caught:
        call(*args, **kwargs)
    return caught.value.reply_code, caught.value.reply_text


def test_ex_3_a_redeclare_checks_type_then_flags_then_the_alternate_exchange() -> None:
    existing = make_exchange("x", "topic", durable=True, arguments={"alternate-exchange": "ae"})
    exchangedeclares.check_equivalent("/", existing, **SAME)
    check = exchangedeclares.check_equivalent
    code, text = refusal(
        check, "/", existing, **{**SAME, "exchange_type": "fanout", "durable": False}
    )
    assert code == 406 and "'type'" in text
    code, text = refusal(check, "/", existing, **{**SAME, "durable": False, "arguments": {}})
    assert code == 406 and "'durable'" in text
    code, text = refusal(check, "/", existing, **{**SAME, "arguments": {}})
    assert code == 406 and "'alternate-exchange'" in text


def test_a_new_exchange_named_amq_is_refused_with_403() -> None:
    code, text = refusal(exchangedeclares.check_new, "/", "amq.mine", {})
    assert code == 403 and "reserved prefix 'amq.*'" in text
    exchangedeclares.check_new("/", "mine", {"alternate-exchange": "ae"})
