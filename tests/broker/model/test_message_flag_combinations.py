"""Every property-flag combination: ``Message`` reads persistence and headers as a parser would.

Why: a publish's ``Message`` reads the delivery-mode octet in place when no property comes
before it and no second flags word follows, and ``has_headers`` from the first flags byte
(f6d55c9, 1985575; #32). A mistake in those bit tests would only show on some combination of
properties a client happens to send (content-type with delivery-mode, headers with it, all
fourteen, a second flags word), so every one of the 2**14 combinations is built here, by hand
from pamqp's value encoders rather than by the broker's own encoder, and each must give what
the properties say and what the full decoder (``properties.delivery_mode``) says.
"""

from __future__ import annotations

import datetime
import itertools
import struct

from hutch_broker.model.messages import Message
from hutch_broker.protocol import properties
from pamqp import encode

# The 14 basic properties in wire order (flag 0x8000 down to 0x0004), each with its encoding.
FIELDS: list[tuple[str, bytes]] = [
    ("content_type", encode.short_string("application/json")),
    ("content_encoding", encode.short_string("gzip")),
    ("headers", encode.field_table({"CC": ["k"], "h": 1})),
    ("delivery_mode", b""),  # filled in per case: the octet under test
    ("priority", encode.octet(2)),  # a 2 where a misplaced read would take it for "persistent"
    ("correlation_id", encode.short_string("\x02")),
    ("reply_to", encode.short_string("r")),
    ("expiration", encode.short_string("60000")),
    ("message_id", encode.short_string("m")),
    ("timestamp", encode.timestamp(datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC))),
    ("message_type", encode.short_string("t")),
    ("user_id", encode.short_string("guest")),
    ("app_id", encode.short_string("a")),
    ("cluster_id", encode.short_string("c")),
]
DELIVERY_MODE = 3  # its index in FIELDS
HEADERS = 2


def raw_of(present: tuple[bool, ...], mode: int, *, second_word: bool = False) -> bytes:
    """The content header's bytes from the property flags on, for these properties."""
    flags = sum(0x8000 >> index for index, here in enumerate(present) if here)
    values = b"".join(
        (bytes((mode,)) if index == DELIVERY_MODE else value)
        for index, ((_, value), here) in enumerate(zip(FIELDS, present, strict=True))
        if here
    )
    if second_word:  # the continuation bit, then a second flags word whose first byte is a 2
        return struct.pack(">HH", flags | 1, 0x0200) + values
    return struct.pack(">H", flags) + values


def cases() -> list[tuple[tuple[bool, ...], int]]:
    found = []
    for present in itertools.product((False, True), repeat=len(FIELDS)):
        modes = (1, 2, 0, 3) if present[DELIVERY_MODE] else (0,)
        found += [(present, mode) for mode in modes]
    return found


CASES = cases()


def test_every_combination_reads_the_delivery_mode_the_properties_carry() -> None:
    wrong = []
    for present, mode in CASES:
        raw = raw_of(present, mode)
        expected = present[DELIVERY_MODE] and mode == 2
        message = Message("", "q", raw, b"x")
        if not message.persistent == expected == (properties.delivery_mode(raw) == 2):
            wrong.append((present, mode, message.persistent))
    assert not wrong, wrong[:5]
    assert len(CASES) == 2**13 + 4 * 2**13


def test_every_combination_tells_a_headers_table_apart() -> None:
    wrong = []
    for present, mode in CASES:
        raw = raw_of(present, mode)
        message = Message("", "q", raw, b"x")
        decoded = "headers" in properties.decode_properties(raw)
        if not message.has_headers == present[HEADERS] == decoded:
            wrong.append((present, mode))
    assert not wrong, wrong[:5]


def test_a_second_flags_word_is_never_read_as_persistent() -> None:
    """The full decoder gives no delivery mode past a continuation bit, so neither may the
    in-place read (the protocol refuses such a header before a Message is made, but the model
    takes raw properties from other places too: the store, the management API)."""
    wrong = []
    for present, mode in CASES:
        if not present[DELIVERY_MODE] or mode != 2:
            continue
        raw = raw_of(present, mode, second_word=True)
        if Message("", "q", raw, b"x").persistent or properties.delivery_mode(raw) is not None:
            wrong.append(present)
    assert not wrong, wrong[:5]


def test_the_cases_reach_both_reads() -> None:
    """Both the in-place read (nothing before delivery-mode) and the parser (something before
    it) see persistent and transient messages, so neither branch goes untested."""
    seen = set()
    for present, mode in CASES:
        if present[DELIVERY_MODE]:
            inline = not any(present[:DELIVERY_MODE])
            seen.add((inline, Message("", "q", raw_of(present, mode), b"").persistent))
    assert seen == {(True, True), (True, False), (False, True), (False, False)}
