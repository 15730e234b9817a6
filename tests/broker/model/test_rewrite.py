"""Targeted header edits (IMPL-2, IMPL-3) and dead-letter headers (DLX-3), in memory."""

import struct

import pytest
from hutch_broker.model import deadletter
from hutch_broker.model.messages import Message
from hutch_broker.protocol import properties, rewrite

FULL = {
    "content_type": "a",
    "headers": {"x": 1, "y": "z"},
    "delivery_mode": 2,
    "priority": 1,
    "correlation_id": "c",
    "reply_to": "r",
    "expiration": "100",
    "timestamp": 1_577_836_800,  # 2020-01-01: the property is read back as its integer
    "app_id": "app",
}


@pytest.mark.parametrize("props", [{}, {"delivery_mode": 2}, FULL])
def test_with_message_id_keeps_every_other_property(props):
    raw = properties.encode_properties(**props)
    out = rewrite.with_message_id(raw, "hutch-abc-1")
    decoded = properties.decode_properties(out)
    assert decoded.pop("message_id") == "hutch-abc-1"
    assert decoded == props
    assert rewrite.has_message_id(out)
    assert not rewrite.has_message_id(raw)


def test_edit_headers_copies_untouched_values_byte_for_byte():
    # A publisher's 'l' 1 must stay 'l' (pamqp would re-encode it as 'b').
    table_body = b"\x01n" + b"l" + struct.pack(">q", 1)
    raw = struct.pack(">H", 0x2000) + struct.pack(">I", len(table_body)) + table_body
    out = rewrite.edit_headers(raw, set_values={"k": rewrite.encode_value("v")})
    assert out.endswith(table_body)
    assert rewrite.header_value(out, "n") == b"l" + struct.pack(">q", 1)


def test_dead_letter_headers_types_and_counts():
    raw = properties.encode_properties(expiration="5000", delivery_mode=2, headers={"CC": ["b"]})
    message = Message("src-x", "rk", raw, b"body")
    first, keys = deadletter.dead_letter(
        message,
        queue="q1",
        reason="expired",
        now_s=1_700_000_000,
        dead_letter_exchange="dlx",
        dead_letter_routing_key=None,
    )
    assert keys == ["rk", "b"]
    assert first.exchange == "dlx"
    assert first.routing_key == "rk"
    assert first.persistent
    assert properties.expiration(first.raw_properties) is None
    tagged = rewrite.header_value(first.raw_properties, "x-death")
    entry_bytes = tagged
    assert b"\x05countl" in entry_bytes  # count is a signed 64-bit 'l'
    assert b"\x04timeT" in entry_bytes  # time is a timestamp 'T'
    death = deadletter.existing_deaths(first)[0]
    assert death["count"] == 1
    assert death["reason"] == "expired"
    assert death["original-expiration"] == "5000"
    assert death["routing-keys"] == ["rk", "b"]
    headers = first.headers()
    assert headers["x-first-death-reason"] == "expired"
    assert headers["x-last-death-queue"] == "q1"
    # The same (queue, reason) again: count 2, still one entry; a new one goes first.
    second, _ = deadletter.dead_letter(
        first,
        queue="q1",
        reason="expired",
        now_s=1_700_000_001,
        dead_letter_exchange="dlx",
        dead_letter_routing_key="fixed",
    )
    assert [d["count"] for d in deadletter.existing_deaths(second)] == [2]
    assert second.routing_key == "fixed"
    third, _ = deadletter.dead_letter(
        second,
        queue="q2",
        reason="rejected",
        now_s=1_700_000_002,
        dead_letter_exchange="dlx",
        dead_letter_routing_key=None,
    )
    deaths = deadletter.existing_deaths(third)
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
        ("q2", "rejected", 1),
        ("q1", "expired", 2),
    ]
    assert third.headers()["x-first-death-reason"] == "expired"
    assert third.headers()["x-last-death-reason"] == "rejected"


def test_cycle_rule():
    message = Message("x", "rk", properties.encode_properties(), b"")
    once, _ = deadletter.dead_letter(
        message,
        queue="q",
        reason="expired",
        now_s=0,
        dead_letter_exchange="dlx",
        dead_letter_routing_key=None,
    )
    assert deadletter.is_cycle(once, "q")
    assert not deadletter.is_cycle(once, "other")
    rejected, _ = deadletter.dead_letter(
        message,
        queue="q",
        reason="rejected",
        now_s=0,
        dead_letter_exchange="dlx",
        dead_letter_routing_key=None,
    )
    assert not deadletter.is_cycle(rejected, "q")
